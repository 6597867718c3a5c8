"""Paths as the tool prints them: never where this machine keeps a file.

Output is pasted into pull requests, tickets and chat, so a path is shown relative to the
current directory, else to the git work tree it is in, else to the folder the `provisioner`
package is installed in (files shipped in the wheel: `provisioner/_bundled/policies`), else by
its name alone.
"""

from __future__ import annotations

from pathlib import Path


def work_tree_of(path: Path) -> Path | None:
    """The nearest folder above `path` (or itself) holding a `.git`: its git work tree."""
    for folder in (path, *path.parents):
        if (folder / ".git").exists():
            return folder
    return None


def display_path(path: Path | str) -> str:
    """`path` relative to the current directory, its git work tree or the package's install
    folder, else its name."""
    p = Path(path).resolve()
    installed = Path(__file__).resolve().parent.parent  # site-packages, or a checkout's root
    for base in (Path.cwd().resolve(), work_tree_of(p), installed):
        if base is None:
            continue
        try:
            return p.relative_to(base).as_posix() or "."
        except ValueError:
            continue
    return p.name
