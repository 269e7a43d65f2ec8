"""``envfleet train``: a single-file PPO (``ppo.py``) over its torch-free settings (``args``),
the modules beside it that its loop uses (``envs``, ``nets``, ``evaluation``, ``bookkeeping``,
``ideal``, ``checkpoint``) and its command line (``cli`` over ``presets``, ``checks``,
``report`` and ``play``)."""
