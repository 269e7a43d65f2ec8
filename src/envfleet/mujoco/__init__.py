"""MuJoCo: Gymnasium's MuJoCo v5 envs batched, bit for bit, stepped by a compiled loop over
MuJoCo's C API with the GIL released (``envfleet.make("HalfCheetah-v5", n)``)."""

from envfleet.mujoco.vector_env import FAMILIES, MujocoVectorEnv, is_mujoco_id, make_mujoco

__all__ = ["FAMILIES", "MujocoVectorEnv", "is_mujoco_id", "make_mujoco"]
