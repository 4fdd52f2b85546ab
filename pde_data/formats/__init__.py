"""Files into the data model and back: the one opener (:func:`pde_data.open_source`, a :class:`Source`),
PDEBench, The Well, foreign files, generated sets' manifests, the prediction writer. Imports only
``pde_data.core``."""
