"""Native batched envs: kernels over a structure of arrays, lifted by the backends."""
