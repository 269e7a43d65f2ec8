"""``envfleet train``: a single-file PPO (``ppo.py``), the modules beside it that its loop uses
(``envs``, ``nets``, ``evaluation``, ``bookkeeping``, ``ideal``, ``checkpoint``) and its command
line (``cli.py``)."""
