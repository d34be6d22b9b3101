"""The public surface: each layer's ``__all__`` and how many of its names no other layer uses.

Run: ``python -m benchmarks.public_surface`` (this checkout), or on another checkout's source
``PYTHONPATH=OTHER/src python -m benchmarks.public_surface`` (the package is imported from
wherever Python finds it first; the report names the folder).

A layer's name counts as used elsewhere when any source file outside the layer's folder
mentions it, the top-level package's re-exports included (those are the library's front
door), and the tools package's files (``tools/src``, a checkout's second distribution).
What is left is a layer's surface that only its own files, the tests, the benchmarks
or users touch: candidates to make private, or types that appear in public signatures.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import re
from pathlib import Path
from typing import Any


def surface() -> dict[str, Any]:
    """``{"package": folder, "top_level": n, "layers": {name: {"all": n, "unused": [...]}}}``."""
    import episodestream

    src = Path(episodestream.__file__).parent
    texts = {path: path.read_text(encoding="utf-8") for path in src.rglob("*.py")}
    tools = src.parents[1] / "tools" / "src"  # the checkout's episodestream-tools, when there
    texts.update({path: path.read_text(encoding="utf-8") for path in tools.rglob("*.py")})
    layers: dict[str, Any] = {}
    for info in sorted(pkgutil.iter_modules([str(src)]), key=lambda module: module.name):
        if not info.ispkg:
            continue
        module = importlib.import_module(f"episodestream.{info.name}")
        names = list(getattr(module, "__all__", []))
        folder = src / info.name
        outside = [text for path, text in texts.items() if folder not in path.parents]
        unused = [
            name
            for name in names
            if not any(re.search(rf"\b{re.escape(name)}\b", text) for text in outside)
        ]
        layers[info.name] = {"all": len(names), "unused": unused}
    return {"package": str(src), "top_level": len(episodestream.__all__), "layers": layers}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--names", action="store_true", help="list the unused names")
    args = parser.parse_args(argv)
    report = surface()
    layers = report["layers"]
    print(f"package: {report['package']}")
    print(f"top-level __all__: {report['top_level']}")
    print(f"{'layer':<14}{'__all__':>8}{'used by no other layer':>24}")
    for name, layer in layers.items():
        print(f"{name:<14}{layer['all']:>8}{len(layer['unused']):>24}")
        if args.names and layer["unused"]:
            print("    " + ", ".join(layer["unused"]))
    total = sum(layer["all"] for layer in layers.values())
    unused = sum(len(layer["unused"]) for layer in layers.values())
    print(f"{'all layers':<14}{total:>8}{unused:>24}")
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
