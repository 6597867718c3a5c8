"""Where the reviewed policies (and the program that renders them) come from.

- head: a policies/ directory in the working tree;
- base: a git ref (the policy files read with `git show REF:policies/...`; a ref without them is
  a base with no pools) or a directory (`--base-dir`, for tests and non-git use).

A git base is also rendered with that ref's own pool program (`provisioner/act/pool_program.py`,
or `infra/pool_program.py` in commits before it moved into the package) and node bootstrap
template when it has them, so a change to the program shows up in the diff too; when the old
program cannot be loaded, the working tree's renders both sides and the review says so.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import act, data_files
from provisioner.config.loader import POLICY_FILES, load_policy
from provisioner.config.models import Policy
from provisioner.domain.errors import ConfigError, InputError
from provisioner.shown_paths import display_path

# What a base ref may look like (branch, tag, sha, HEAD~2, origin/main, main@{1}): never an option.
_REF = re.compile(r"^[A-Za-z0-9_.~^@{}][A-Za-z0-9_./~^@{}+-]{0,199}$")
PROGRAM = Path("pool_program.py")
TEMPLATE = Path("bootstrap") / "slurm-node.cloud-init.yaml"


def default_infra_dir() -> Path:
    return data_files.infra_dir()


def package_program_file() -> Path:
    """The source of the pool program this package renders with (`provisioner.act.pool_program`);
    not imported here, since it imports `pulumi`."""
    return Path(act.__file__).resolve().with_name("pool_program.py")


@dataclass
class PolicySource:
    """A loaded policy, where it came from, and the infra/ directory to render it with."""

    label: str  # "working tree", "HEAD (1a2b3c4)", "dir ../base"
    policy: Policy
    infra_dir: Path | None = None  # None: the working tree's infra/
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def empty_policy() -> Policy:
    return Policy()


def load_dir(path: Path, label: str | None = None) -> PolicySource:
    """A policies/ directory (or one policy file). No policy file at all: a base with no pools."""
    p = Path(path)
    if p.is_dir() and not any((p / name).exists() for name in POLICY_FILES):
        shown = display_path(p)
        return PolicySource(
            label or f"dir {shown}", empty_policy(), notes=[f"{shown}: no policy files"]
        )
    if not p.exists():
        raise ConfigError(str(p), "", "no such file or directory")
    policy = load_policy(p)
    files = [str(p / n) for n in POLICY_FILES if (p / n).exists()] if p.is_dir() else [str(p)]
    return PolicySource(label or f"dir {display_path(p)}", policy, files=files)


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, timeout=60, check=False
        )
    except FileNotFoundError:
        raise InputError("git is not installed: use --base-dir instead of --base") from None
    except subprocess.TimeoutExpired:
        raise InputError(f"git {args[0]} timed out") from None


def git_root(path: Path) -> Path | None:
    start = path if path.is_dir() else path.parent
    if not start.exists():
        return None
    res = _git(start, "rev-parse", "--show-toplevel")
    if res.returncode != 0:
        return None
    return Path(res.stdout.decode().strip()).resolve()


def check_ref(ref: str) -> str:
    if not _REF.match(ref) or ".." in ref:
        raise InputError(f"base: {ref!r} is not a git ref")
    return ref


def resolve_commit(root: Path, ref: str) -> str:
    check_ref(ref)
    res = _git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    if res.returncode != 0:
        raise InputError(f"base: {ref!r} is not a commit in {root}")
    return res.stdout.decode().strip()


def _show(root: Path, sha: str, path: str) -> bytes | None:
    res = _git(root, "show", f"{sha}:{path}")
    return res.stdout if res.returncode == 0 else None


def _rel(path: Path, root: Path) -> str | None:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return None


def load_git(
    ref: str, policies: Path, *, infra_dir: Path | None = None, root: Path | None = None
) -> PolicySource:
    """The policy files of `policies` (a directory in a git work tree) as of `ref`."""
    if not policies.is_dir():
        raise InputError(f"{policies}: a git base needs a policies/ directory (or use --base-dir)")
    root = root or git_root(policies)
    if root is None:
        raise InputError(f"{policies}: not in a git work tree (use --base-dir)")
    rel = _rel(policies, root)
    if rel is None:
        raise InputError(f"{policies}: not inside the git work tree {root}")
    sha = resolve_commit(root, ref)
    label = f"{ref} ({sha[:7]})"
    tmp = tempfile.TemporaryDirectory(prefix="iac-base-")
    base = Path(tmp.name)
    src = PolicySource(label, empty_policy(), _tmp=tmp)
    try:
        pol_dir = base / "policies"
        pol_dir.mkdir()
        prefix = "" if rel == "." else f"{rel}/"
        for name in POLICY_FILES:
            data = _show(root, sha, f"{prefix}{name}")
            if data is not None:
                (pol_dir / name).write_bytes(data)
                src.files.append(f"{ref}:{prefix}{name}")
        if src.files:
            try:
                src.policy = load_policy(pol_dir)
            except ConfigError as exc:
                where = exc.source.replace(str(pol_dir), f"{ref}:{rel}")
                raise ConfigError(where, exc.field, exc.message) from None
        else:
            src.notes.append(f"{ref}:{rel} has no policy files: a base with no pools")
        infra = _rel(infra_dir or default_infra_dir(), root)
        if infra is not None:
            # The program's place in this package, then where commits before the move kept it.
            places = [_rel(package_program_file(), root), f"{infra}/{PROGRAM.as_posix()}"]
            shown = (_show(root, sha, place) for place in places if place is not None)
            program = next((data for data in shown if data is not None), None)
            template = _show(root, sha, f"{infra}/{TEMPLATE.as_posix()}")
            if program is not None and template is not None:
                (base / "infra" / TEMPLATE).parent.mkdir(parents=True)
                (base / "infra" / PROGRAM).write_bytes(program)
                (base / "infra" / TEMPLATE).write_bytes(template)
                src.infra_dir = base / "infra"
    except BaseException:
        src.close()
        raise
    return src
