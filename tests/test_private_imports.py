"""No module imports a private module or name of another subpackage (issue 17 point 8).

``shardstore.<package>._module`` and ``_name``s are implementation details of their package:
``core/rawwrite.py`` once used a private helper of ``store/local.py`` and
``formats/precomputed/kv.py`` a private sharding module. What another package needs is made
public where it lives. The package's own top-level helpers (``shardstore._sync`` and the like)
are shared by design and not checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

import shardstore

SRC = Path(shardstore.__file__).resolve().parent

#: known cases still to make public where they live: (importer, module, name or "" for the
#: module itself). store/wrappers.py is being reworked; formats/_entry.py holds the entry-point
#: helpers that api.py and the CLI share with the format packages.
ALLOWED = {
    ("formats/precomputed/gzfiles.py", "shardstore.store.wrappers", "_Wrapper"),
    ("api.py", "shardstore.formats._entry", ""),
    ("cli/copy.py", "shardstore.formats._entry", ""),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(importer: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = importer.split(".")
    base = base[: len(base) - node.level + (1 if is_package else 0)]
    return ".".join(base + ([node.module] if node.module else []))


def _subpackage(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2])  # shardstore.<package> (or shardstore.<module>)


def _violations() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        importer = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = _resolve(importer, path.name == "__init__.py", node)
            package = _subpackage(target)
            if not target.startswith("shardstore.") or package == _subpackage(importer) or package.startswith("shardstore._"):
                continue  # outside, within one subpackage, or a shared top-level helper module
            where = str(path.relative_to(SRC))
            private = [p for p in target.split(".")[2:] if p.startswith("_") and (where, target, "") not in ALLOWED]
            names = [
                a.name for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__") and (where, target, a.name) not in ALLOWED
            ]
            if private or names:
                found.append(f"{where}:{node.lineno} imports {target} {names or ''}".strip())
    return found


def test_no_private_imports_across_subpackages() -> None:
    assert _violations() == []


def test_the_check_sees_a_private_import() -> None:
    node = ast.parse("from ...sharding._uint64_format import ShardingSpec").body[0]
    assert isinstance(node, ast.ImportFrom)
    target = _resolve("shardstore.formats.precomputed.kv", False, node)
    assert target == "shardstore.sharding._uint64_format"
    assert _subpackage(target) != _subpackage("shardstore.formats.precomputed.kv")
