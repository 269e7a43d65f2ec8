"""``envfleet train``: a single-file PPO (``ppo.py``) and its command line (``cli.py``)."""
