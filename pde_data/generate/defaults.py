"""Every generator's parameters and their defaults, defined once.

The registry :data:`pde_data.generate.registry.KINDS` holds these tables (``KINDS[kind].defaults``) and re-exports
them; the generator functions' signatures (``pde_data.generate_darcy`` …) and the ``circuitop generate``
options take their defaults from here, and ``tests/test_generator_defaults.py`` checks that all three agree.
The module imports nothing, so the generator modules, which the registry imports, can import it too.
"""

__all__ = ["DEFAULTS", "SEEDS"]

#: ``{generator: {parameter: default}}`` in the library's keyword names (``dtype`` by its torch name); the
#: gapped digits are a fixed set outside the registry, whose generators make any range of samples
DEFAULTS: dict[str, dict[str, object]] = {
    "order": {"order": 1, "n_points": 256, "tau": 0.08},
    "poisson": {"K": 16, "n_grid": 64},
    "darcy": {"n_grid": 128, "beta": 1.0},
    "degradation": {"min_length": 16, "max_length": 32},
    "ns": {"visc": 1e-3, "n_sim": 128, "n_out": 64, "t_final": 20.0, "n_records": None, "record_initial": False,
           "dt": 1e-3, "batch_size": 8, "dtype": "float32"},
    "swe": {"n_grid": 128, "t_final": 1.0, "n_frames": 101, "momenta": False, "batch_size": 8, "dtype": "float32"},
    "digits": {"gap": 0.0},
}

#: each generator's default seed (the order benchmark's is its training split's, 42)
SEEDS: dict[str, int] = {"order": 42, "poisson": 0, "darcy": 0, "degradation": 0, "ns": 0, "swe": 0, "digits": 0}
