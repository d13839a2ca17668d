"""``shardstore view``: serve datasets and the bundled Neuroglancer client; open a link to them."""

from __future__ import annotations

import argparse
import webbrowser

from ._common import AddCommand, out
from .serve import add_server_arguments, storage_options, warn_if_public


def run(args: argparse.Namespace) -> None:
    from ..serve import Server, neuroglancer_link, neuroglancer_state

    options = storage_options(args.storage_options)
    warn_if_public(args.bind)
    servers = []
    try:
        for i, path in enumerate(args.paths):
            # one server per PATH, on consecutive ports; the first also serves the client
            port = args.port + i if args.port else 0
            own_client = i == 0 and args.neuroglancer_url is None
            servers.append(Server(path, port=port, bind=args.bind, storage_options=options,
                                  client=own_client, max_depth=args.max_depth).start())
        layers = [(d, s.url) for s in servers for d in s.datasets if d.viewable]
        state = neuroglancer_state([d for d, _ in layers], [u for _, u in layers])
        client = args.neuroglancer_url or servers[0].client_url
        link = neuroglancer_link(state, client)
        for server in servers:
            out(f"serving {server.source.where} read-only at {server.url}")
        if not layers:
            out("  no viewable datasets found (Zarr v3, N5 or precomputed)")
        for dataset, url in layers:
            out(f"  {dataset.name}: {dataset.source(url)}")
        out("")
        out(link)
        out("")
        out("(Ctrl-C stops the server)")
        if not args.no_browser:
            webbrowser.open(link)
        servers[0].serve_forever()
    finally:
        for server in servers:
            server.stop()


def add_parser(add: AddCommand) -> None:
    p = add("view", "show datasets in Neuroglancer (served locally, works offline)",
            "Serve each PATH (directory, dataset, s3:// or http(s)://) and the Neuroglancer client "
            "bundled in the `neuroglancer` package, then open (or print) a link whose state shows "
            "one layer per dataset found.")
    p.add_argument("paths", metavar="PATH", nargs="+", help="directory, dataset, s3:// or http(s):// location")
    add_server_arguments(p, 8000)
    p.add_argument("--no-browser", action="store_true", help="print the link, do not open a browser")
    p.add_argument("--neuroglancer-url", metavar="URL",
                   help="use this Neuroglancer client instead of the bundled one (e.g. https://neuroglancer-demo.appspot.com/)")
    p.set_defaults(func=run)
