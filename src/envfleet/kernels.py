"""The kernel contract: everything a native env family is written with, in one module.

A family (envfleet's own in ``envs/``, or yours: docs/NATIVE_ENVS.md) imports from here and
from nothing else of envfleet's native layer: the spec it declares, the decorator of its kernel
code, the math that runs on one env's numbers in a kernel and on whole batches in a torch form,
the counter-based random draws, the checks of its params, and the helpers of its torch forms
and hooks. The implementations live in ``envfleet.native`` (the engines use them there);
registering a family is ``envfleet.register_native_env(spec)``, and the errors of
registration, compilation and bounds checks are ``envfleet``'s too.
"""

# the declaration: the spec, the decorator of its kernel code, "no time limit"
from envfleet.native.jit import kernel_function, step_rows
from envfleet.native.spec import (
    UNLIMITED_STEPS,
    NativeEnvSpec,
    as_float,
    finite_param,
    one_value,
    physics_param,
)

# isort: split
# one source for kernels and torch forms: the scalar form in a kernel, elementwise on a batch
from envfleet.native.elementwise import angle_normalize, as32, clip, cos, dual, mul32, sin, where

# randomness: the same draws on every backend
from envfleet.native.rng import env_uniform, env_uniform_torch, env_uniforms_torch, random_u64

# torch forms on the host: NumPy views of CPU tensors, kept work arrays, libm's sin/cos
from envfleet.native.tensor_math import host_arrays, on_host, scratch, sin_cos, takes_arrays

# isort: split
# hooks: the renderer, the vector env a family may subclass, host-side compiled helpers
from envfleet.native.kernel_cache import disk_cached
from envfleet.native.render import ReferenceRenderer
from envfleet.native.vector_env import NativeVectorEnv

__all__ = [
    "UNLIMITED_STEPS",
    "NativeEnvSpec",
    "NativeVectorEnv",
    "ReferenceRenderer",
    "angle_normalize",
    "as32",
    "as_float",
    "clip",
    "cos",
    "disk_cached",
    "dual",
    "env_uniform",
    "env_uniform_torch",
    "env_uniforms_torch",
    "finite_param",
    "host_arrays",
    "kernel_function",
    "mul32",
    "on_host",
    "one_value",
    "physics_param",
    "random_u64",
    "scratch",
    "sin",
    "sin_cos",
    "step_rows",
    "takes_arrays",
    "where",
]
