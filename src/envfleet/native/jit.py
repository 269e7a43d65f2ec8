"""``kernel_function``: the decorator for code that runs inside a kernel, on every target.

It compiles for numba CPU and CUDA alike (``register_jitable``) and stays a plain Python
function (the CUDA simulator runs it as is). Inlined at the Numba IR level so that the array
tuples a kernel unpacks cost no reference counting per env.
"""

from numba.extending import register_jitable

kernel_function = register_jitable(inline="always")
