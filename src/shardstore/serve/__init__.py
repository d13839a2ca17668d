"""Serve datasets over HTTP for Neuroglancer (``shardstore serve`` / ``view``).

``Server`` serves a local directory, an ``s3://`` or ``http(s)://`` location (or any Store)
read-only, with byte ranges and CORS; ``find_datasets`` lists what is below a root,
``neuroglancer_state`` / ``neuroglancer_link`` build the viewer state that shows it.
"""

from .app import CLIENT_MOUNT, Server, make_app, neuroglancer_client_dir
from .discover import Dataset, describe, find_datasets
from .source import LocalSource, Source, StoreSource, open_source
from .state import contrast_range, neuroglancer_link, neuroglancer_state

__all__ = [
    "CLIENT_MOUNT",
    "Dataset",
    "LocalSource",
    "Server",
    "Source",
    "StoreSource",
    "contrast_range",
    "describe",
    "find_datasets",
    "make_app",
    "neuroglancer_client_dir",
    "neuroglancer_link",
    "neuroglancer_state",
    "open_source",
]
