"""The data model, atomic I/O, fingerprints, moments, errors and the native-kernel builder: what every other
layer of ``pde_data`` (and ``circuitop``, the cells) may import; imports no other layer."""
