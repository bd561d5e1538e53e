"""Executors for step and job bodies beyond the in-process default.

`durable.executors.dask` (the ``dask`` extra) runs bodies on a Dask
``distributed`` cluster; the protocol and the in-process executor live in
`durable.decorators.executors`. Import a submodule only when you use it:
this package imports no third-party library.
"""
