"""``kernel_function``: the decorator for code that runs inside a kernel, on every target.

It compiles for numba CPU and CUDA alike (``register_jitable``) and stays a plain Python
function (the CUDA simulator runs it as is). Not ``inline="always"``: numba-cuda's GPU target
fails to type such functions, and on CPU LLVM inlines them anyway (measured: same speed).
"""

from numba.extending import register_jitable

kernel_function = register_jitable
