"""Build the optional native reader (``shardstore._rawio``); metadata lives in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and shardstore reads those
chunks through its Python path instead (slower on raw data, same results).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "shardstore._rawio",
            ["src/shardstore/_rawio.c"],
            depends=["src/shardstore/_rawio_decode.h"],
            optional=True,
            extra_compile_args=["-O2", "-std=c99"],
        )
    ]
)
