"""How a box starts (``Box.create``'s work): its run's registration beside its start (layers, the box's user
namespace, the launcher, the guest's first answer).

The two need nothing of each other, so ``Box.create`` runs them at the same time; both must be done, and neither
failed, before the box is ``running`` or its egress door decides anything. Within the start, the box's user
namespace is made in a thread beside the layers (for a backend that takes one), and a real box's disk is formatted
(in its own process) while the base is built.

A box started ahead (``pool.py``) is started by ``launch_ahead`` without a workspace and waits in its guest's boot;
``start_taken_box`` is then the start: the base built, the workspace attached in the running box, the guest's
configuration released.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..box.backend import BOX_HOME, BOX_JOB_UID, BoxBackend, BoxSpec
from ..box.etcgen import generate_etc
from ..box.userns import box_user_namespace
from ..rules import PROXY_ENV
from ..tasks import spawn
from .channels import AgentListener, BootServer, ChannelError
from .egress_listener import EgressListener
from .guest_link import GuestLink
from .pool import START_AHEAD_NICE, PoolShape, WarmBox
from .recorder import RunRecorder

if TYPE_CHECKING:
    from .box import Box
    from .layers import BoxLayers
    from .manager import BoxManager

GUEST_ARGV = ["/usr/bin/python3", "-I", "-S", "/run/tkbox/guest"]
GUEST_CONNECT_TIMEOUT = 20.0


def _close_when_made(making: asyncio.Task[int]) -> None:
    """Close the fd ``making`` makes, once it has (now, if it is done); a failed or cancelled making has none."""
    def close(task: asyncio.Task[int]) -> None:
        if not task.cancelled() and task.exception() is None:
            os.close(task.result())
    making.add_done_callback(close)


async def start_box(box: Box, backend: BoxBackend) -> None:
    """Layers, the box's user namespace (made beside the layers when the backend takes one), the box, its
    guest's first answer. Until ``Box.create`` hands it a real handler, the egress door refuses every connection."""
    # a real box's disk is formatted (in its own process) while the base is built
    disk_bytes = box.settings.limit("disk") if backend.isolated else None
    making_userns = (spawn(asyncio.to_thread(box_user_namespace, box.uid, box.job_uid),
                           name=f"box-userns-{box.id}") if backend.takes_user_namespace else None)
    try:
        starting = [asyncio.to_thread(box.layers.start, disk_bytes)]
        if disk_bytes is not None:  # a linked base's view: its mapping namespace (a fork) beside the disk's start
            starting.append(asyncio.to_thread(box.layers.premake_view, box.settings.workspace, job_uid=box.job_uid))
        for outcome in await asyncio.gather(*starting, return_exceptions=True):
            if isinstance(outcome, BaseException):
                raise outcome
        layers = await asyncio.to_thread(_prepare_layers, box)
        userns_fd = await asyncio.shield(making_userns) if making_userns is not None else None
        await _launch(box, backend, layers, userns_fd)
    finally:  # the launcher has its own copy by now
        if making_userns is not None:
            _close_when_made(making_userns)


async def _launch(box: Box, backend: BoxBackend, layers: dict[str, Path], userns_fd: int | None) -> None:
    boot = BootServer(box.runtime_dir / "boot.sock", box.uid, _boot_config(box, backend, layers))
    agent = AgentListener(box.runtime_dir / "agent.sock", box.uid)
    box.egress = EgressListener(box.runtime_dir / "egress.sock", box.uid,
                                lambda reader, writer: box.egress_handler(reader, writer))
    await _open_channels(box.runtime_dir, box.uid, boot, agent, box.egress)
    try:
        spec = _box_spec(box.manager, box.id, box.layers, layers, box.uid, box.job_uid,
                         channels={"boot": boot.path, "agent": agent.path, "egress": box.egress.path},
                         shape=PoolShape.of(box.settings), userns_fd=userns_fd)
        box.process = await backend.start(spec, _guest_argv(box.manager, backend, boot.path))
        reader, writer = await agent.wait(GUEST_CONNECT_TIMEOUT)
    finally:
        await boot.close()
        await agent.close()
    await _first_answer(box, reader, writer)


async def _first_answer(box: Box, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The guest's connection becomes the box's link, and the guest answers it once, within the host's deadline."""
    box.link = GuestLink(reader, writer, on_failure=box.guest_failed)
    await asyncio.wait_for(box.link.request("ping"), GUEST_CONNECT_TIMEOUT)


async def _open_channels(runtime_dir: Path, uid: int, boot: BootServer, agent: AgentListener,
                         egress: EgressListener) -> None:
    os.chown(runtime_dir, uid, uid)  # the box uid connects to its channel sockets
    os.chmod(runtime_dir, 0o700)
    await boot.start()
    await agent.start()
    await egress.start()


def _box_spec(manager: BoxManager, box_id: str, box_layers: BoxLayers, layers: dict[str, Path], uid: int,
              job_uid: int, *, channels: dict[str, Path], shape: PoolShape, userns_fd: int | None,
              workspace_later: bool = False, nice: int = 0) -> BoxSpec:
    return BoxSpec(
        box_id=box_id, state_dir=box_layers.backend, base_dir=layers["base"], upper_dir=layers["upper"],
        work_dir=layers["work"], etc_dir=layers["etc"], box_uid=uid, job_uid=job_uid, channels=channels,
        guest_dir=manager.guest_dir,
        image_root=Path(shape.image[4:]) if shape.image.startswith("dir:") else None,
        limits=shape.limits(),
        disks_root=manager.config.paths.box_state_root, userns_fd=userns_fd, workspace_later=workspace_later,
        nice=nice,
    )


async def launch_ahead(manager: BoxManager, warm: WarmBox, shape: PoolShape, *, owner: tuple[int, int]) -> None:
    """Start the box of ``warm`` without a workspace (``pool.py``): its dirs, its disk of ``shape.disk`` bytes
    mounted with empty upper and work dirs, the view's mapping made ahead for a checkout of ``owner``, its
    channels (the boot configuration held back), the box, at ``START_AHEAD_NICE``. Fills ``warm.spec`` and
    ``warm.process``."""
    backend = manager.backend
    box_layers = warm.layers
    manager.config.paths.box_state(warm.box_id).mkdir(parents=True, mode=0o700)
    box_layers.make_root()
    warm.runtime_dir.mkdir(mode=0o700)
    disk_bytes = shape.disk if backend.isolated else None
    making_userns = (spawn(asyncio.to_thread(box_user_namespace, warm.uid, warm.job_uid),
                           name=f"box-userns-{warm.box_id}") if backend.takes_user_namespace else None)
    try:
        await asyncio.to_thread(box_layers.start, disk_bytes)
        await asyncio.to_thread(box_layers.prepare_disk, warm.job_uid)
        if disk_bytes is not None:
            await asyncio.to_thread(box_layers.premake_mapping, *owner, warm.job_uid)
        await _open_channels(warm.runtime_dir, warm.uid, warm.boot, warm.agent, warm.egress)
        userns_fd = await asyncio.shield(making_userns) if making_userns is not None else None
        warm.spec = _box_spec(manager, warm.box_id, box_layers, _layer_paths(box_layers, manager.etc_dir),
                              warm.uid, warm.job_uid,
                              channels={"boot": warm.boot.path, "agent": warm.agent.path,
                                        "egress": warm.egress.path},
                              shape=shape, userns_fd=userns_fd, workspace_later=True,
                              nice=START_AHEAD_NICE)
        warm.process = await backend.start(warm.spec, _guest_argv(manager, backend, warm.boot.path))
        await _wait_in_boot(warm)
    finally:
        if making_userns is not None:
            _close_when_made(making_userns)


async def _wait_in_boot(warm: WarmBox) -> None:
    """Until the guest, its imports done, waits for its configuration (it has connected to the boot socket): only
    then is the box started ahead further along than a box started cold. Raises ``ChannelError``."""
    assert warm.process is not None
    in_boot = asyncio.ensure_future(warm.boot.served.wait())
    ended = asyncio.ensure_future(warm.process.wait())
    try:
        await asyncio.wait((in_boot, ended), timeout=GUEST_CONNECT_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in (in_boot, ended):
            waiting.cancel()
    if not warm.boot.served.is_set():
        why = (f"ended with {warm.process.returncode}" if warm.process.returncode is not None
               else f"did not reach it within {GUEST_CONNECT_TIMEOUT:.0f} s")
        raise ChannelError(f"the guest of a box started ahead {why} before its boot")


async def start_taken_box(box: Box, backend: BoxBackend, warm: WarmBox) -> None:
    """``start_box`` for a box started ahead: its base built, its workspace attached in the running box, its
    guest's priority restored and its configuration released, its first answer."""
    assert warm.process is not None and warm.spec is not None
    box.process = warm.process
    box.egress = warm.egress
    warm.egress.handler = lambda reader, writer: box.egress_handler(reader, writer)
    try:
        summary = await asyncio.to_thread(
            box.layers.build_base, box.settings.workspace, job_uid=box.job_uid,
            max_files=box.settings.limit("workspace_files"), max_bytes=box.settings.limit("workspace_bytes"),
            link=box.layers.has_disk())
        box.workspace_summary = summary
        await backend.attach_workspace(warm.process, warm.spec, box.layers.lower)
        with contextlib.suppress(ProcessLookupError):  # its jobs are born of it: they start at the usual priority
            os.setpriority(os.PRIO_PROCESS, warm.process.pid, 0)
        layers = _layer_paths(box.layers, box.manager.etc_dir, base=box.layers.lower)
        warm.boot.release(_boot_config(box, backend, layers))
        reader, writer = await warm.agent.wait(GUEST_CONNECT_TIMEOUT)
    finally:
        await warm.boot.close()
        await warm.agent.close()
    await _first_answer(box, reader, writer)


async def register_run(box: Box) -> None:
    """The box's run in the signer (``register_run`` and the must-keep ``tkbox.box``/``tkbox.task``), or the
    warning that this daemon records nothing."""
    if box.manager.signer is not None:
        box.recorder = RunRecorder(box.manager.signer, box.id, stop_box=box.stop_for_loss, on_event=box.emit)
        await box.recorder.register({"box_id": box.id, **box.settings.public()}, box.settings.task)
    else:
        box.emit("daemon.unrecorded", {"warning": "this daemon records nothing: no signer decides this box"})


def _layer_paths(box_layers: BoxLayers, etc: Path, *, base: Path | None = None) -> dict[str, Path]:
    """What a box's spec and boot configuration name: its base (``base``: the lower layer, once built), upper and
    work dirs, and its /etc."""
    return {"base": base or box_layers.base, "upper": box_layers.upper, "work": box_layers.work, "etc": etc}


def _prepare_layers(box: Box) -> dict[str, Path]:
    """The base copy and, for a real box, its own disk of ``limits.disk`` bytes for what it writes."""
    layers = _layer_paths(box.layers, box.manager.etc_dir)
    if box.settings.image.startswith("dir:"):  # an image brings its own /usr: no host loader cache in /etc
        layers["etc"] = box.layers.etc
        generate_etc(layers["etc"], hostname="box", uses_host_usr=False)
    summary = box.layers.prepare(box.settings.workspace, job_uid=box.job_uid,
                                 max_files=box.settings.limit("workspace_files"),
                                 max_bytes=box.settings.limit("workspace_bytes"))
    layers["base"] = box.layers.lower  # a linked base is seen through its idmapped view
    box.workspace_summary = summary if isinstance(summary, dict) else dict(vars(summary))
    return layers


def _boot_config(box: Box, backend: BoxBackend, layers: dict[str, Path]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "box_id": box.id, "env": dict(PROXY_ENV), "workspace": "/workspace",
        "agent_socket": "/run/tkbox/agent.sock", "egress_socket": "/run/tkbox/egress.sock",
        "limits": {"exec_timeout_ms": box.settings.limit("exec_timeout") * 1000,
                   "max_execs": box.settings.limit("execs")},
        "clock": int(time.time() * 1000),
    }
    if backend.isolated:  # execs run as the job user, never as the guest
        config["job"] = {"uid": BOX_JOB_UID, "gid": BOX_JOB_UID, "home": BOX_HOME}
    else:  # test backends: the guest runs on the host and sees host paths
        config.update(workspace=str(layers["base"]), agent_socket=str(box.runtime_dir / "agent.sock"),
                      base_dir=str(layers["base"]), upper_dir=str(layers["upper"]),
                      egress_socket=str(box.runtime_dir / "egress.sock"))
    return config


def _guest_argv(manager: BoxManager, backend: BoxBackend, boot_socket: Path) -> list[str]:
    if backend.isolated:
        return GUEST_ARGV
    # on a test host the guest's loopback is the host's: no forwarder listens there
    return [sys.executable, "-I", "-S", str(manager.guest_dir), "--boot-socket", str(boot_socket),
            "--no-forwarder"]
