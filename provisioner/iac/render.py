"""Render pools into the resources `infra/pool_program.py` declares, under Pulumi mocks.

Without the Pulumi CLI no engine can run a preview, but the program itself runs fine against
`pulumi.runtime.set_mocks`: every registration reaches our `Mocks.new_resource` with its type,
logical name and inputs (engine names, camelCase), which is what a preview would send to the
providers. Pulumi's runtime settings are process-global and its helpers drive their own event
loop, so each render runs in a fresh worker thread with a new loop, one at a time.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioner.act.ports import PoolSpec
from provisioner.act.specs import NodeImages, pool_specs
from provisioner.act.userdata import bootstrap_from, render_user_data
from provisioner.config.models import Policy
from provisioner.domain.offers import Offer

PoolProgram = Callable[[PoolSpec], object]

PROJECT = "gpu-burst-pools"
STACK = "iac-review"
# Node images when the policy configures none (node.images / a pool's image): the same
# placeholders as infra/__main__.py. The review says when it used them.
PLACEHOLDER_IMAGES = {
    "aws": "ami-0123456789abcdef0",
    "gcp": "projects/deeplearning-platform-release/global/images/family/common-cu124",
}
# The suffixes infra/pool_program.py gives the logical names of a group's resources.
_ROLE_SUFFIXES = ("-lt", "-asg", "-tpl", "-mig")

_RENDER_LOCK = threading.Lock()


@dataclass(frozen=True)
class Resource:
    """One registered resource: what a preview would create or update."""

    type: str
    name: str  # the logical (Pulumi) name, unique per type
    pool: str
    group: str
    inputs: Mapping[str, Any]

    @property
    def key(self) -> tuple[str, str]:
        return (self.type, self.name)

    @property
    def short_type(self) -> str:
        return short_type(self.type)


def short_type(typ: str) -> str:
    """`aws:ec2/launchTemplate:LaunchTemplate` -> `aws:ec2:LaunchTemplate` (Pulumi's display)."""
    parts = typ.split(":")
    if len(parts) != 3:
        return typ
    return f"{parts[0]}:{parts[1].split('/')[0]}:{parts[2]}"


@dataclass
class PoolSpecs:
    """The node groups of one policy, and what the review should say about how they were made."""

    specs: list[PoolSpec]
    notes: list[str] = field(default_factory=list)
    skipped_pools: list[str] = field(default_factory=list)


def specs_for_policy(
    policy: Policy,
    catalog: Iterable[Offer],
    *,
    decision_id: str = "iac",
    template_path: Path | None = None,
    pools: Sequence[str] = (),
) -> PoolSpecs:
    """Every node group the policy allows, with images and user data as the controller sets them.

    Images: a pool's `image` wins, then `node.images` (`"aws/us-east-1"` over `"aws"`), then a
    placeholder (noted). Pools on the simulator's `sim` cloud have no resources and are skipped.
    """
    offers = list(catalog)
    out = PoolSpecs([])
    boot = bootstrap_from(policy.node, template_path)
    wanted = set(pools)
    placeholder: list[str] = []
    for pool in policy.pools:
        if wanted and pool.name not in wanted:
            continue
        if pool.cloud == "sim":
            out.skipped_pools.append(pool.name)
            continue
        images = {**PLACEHOLDER_IMAGES, **policy.node.images}
        if pool.image:
            images.update({f"{pool.cloud}/{r}": pool.image for r in pool.regions})
            images[pool.cloud] = pool.image
        elif not any(k == pool.cloud or k.startswith(f"{pool.cloud}/") for k in policy.node.images):
            placeholder.append(pool.name)
        out.specs.extend(
            pool_specs(
                policy,
                offers,
                images=NodeImages(images),
                decision_id=decision_id,
                user_data=lambda s: render_user_data(s, boot),
                project=policy.node.gcp_project,
                pools=[pool.name],
            )
        )
    if placeholder:
        out.notes.append(
            f"no node image configured for {', '.join(placeholder)}: rendered with a placeholder "
            "image (set node.images or the pool's image)"
        )
    if out.skipped_pools:
        out.notes.append(
            "pools on the simulator's 'sim' cloud have no resources: "
            + ", ".join(out.skipped_pools)
        )
    return out


def _plain(value: Any) -> Any:
    """Inputs as plain JSON data: integral floats (the engine's numbers) back to ints."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _group_of(name: str, groups: Mapping[str, PoolSpec]) -> PoolSpec | None:
    for suffix in _ROLE_SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in groups:
            return groups[name[: -len(suffix)]]
    return groups.get(name)


_CACHE: OrderedDict[tuple[str, tuple[PoolSpec, ...]], list[Resource]] = OrderedDict()
_CACHE_MAX = 16


def render_specs(
    specs: Sequence[PoolSpec], program: PoolProgram, *, cache_key: str | None = None
) -> list[Resource]:
    """Run `program` for every spec under Pulumi mocks; the registered resources, sorted.

    With `cache_key` (the digest of the program's source), the same specs rendered by the same
    program are answered from a small in-process cache (rendering is deterministic)."""
    if not specs:
        return []
    key = (cache_key, tuple(specs)) if cache_key is not None else None
    if key is not None:
        with _RENDER_LOCK:
            hit = _CACHE.get(key)
            if hit is not None:
                _CACHE.move_to_end(key)
                return list(hit)
    out = _render(specs, program)
    if key is not None:
        with _RENDER_LOCK:
            _CACHE[key] = out
            while len(_CACHE) > _CACHE_MAX:
                _CACHE.popitem(last=False)
    return list(out)


def _render(specs: Sequence[PoolSpec], program: PoolProgram) -> list[Resource]:
    registered: list[tuple[str, str, dict[str, Any]]] = []
    failure: list[BaseException] = []

    def work() -> None:
        import pulumi
        from pulumi.runtime.settings import SETTINGS
        from pulumi.runtime.stack import run_pulumi_func
        from pulumi.runtime.sync_await import _sync_await

        class Mocks(pulumi.runtime.Mocks):  # type: ignore[misc]
            def new_resource(self, args: Any) -> tuple[str, dict[str, Any]]:
                inputs = dict(args.inputs)
                registered.append((str(args.typ), str(args.name), inputs))
                out = dict(inputs)
                if args.typ == "gcp:compute/instanceTemplate:InstanceTemplate":
                    project = inputs.get("project") or "project"
                    link = f"https://mock/projects/{project}/global/instanceTemplates/{inputs.get('name')}"
                    out["selfLink"] = link
                    out["selfLinkUnique"] = f"{link}?uniqueId=0"
                return f"{args.name}-id", out

            def call(self, args: Any) -> Any:
                return {}

        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            pulumi.runtime.set_mocks(Mocks(), project=PROJECT, stack=STACK, preview=True)
            SETTINGS.rpc_manager.clear()
            SETTINGS.outputs.clear()

            def declare() -> None:
                for spec in specs:
                    program(spec)

            _sync_await(run_pulumi_func(declare))
        except BaseException as exc:  # re-raised in the caller's thread
            failure.append(exc)
        finally:
            asyncio.set_event_loop(None)
            loop.close()

    with _RENDER_LOCK:
        worker = threading.Thread(target=work, name="iac-render", daemon=True)
        worker.start()
        worker.join()
    if failure:
        raise failure[0]
    groups = {s.group_name: s for s in specs}
    out: list[Resource] = []
    for typ, name, inputs in registered:
        if typ.startswith("pulumi:"):  # the stack and default providers
            continue
        spec = _group_of(name, groups)
        out.append(
            Resource(
                type=typ,
                name=name,
                pool=spec.pool if spec else "",
                group=spec.group_name if spec else "",
                inputs=_plain(inputs),
            )
        )
    return sorted(out, key=lambda r: (r.pool, r.group, r.type, r.name))
