"""How a box starts (``Box.create``'s work): its run's registration beside its start (layers, the box's user
namespace, the launcher, the guest's first answer).

The two need nothing of each other, so ``Box.create`` runs them at the same time; both must be done, and neither
failed, before the box is ``running`` or its egress door decides anything. Within the start, the box's user
namespace is made in a thread beside the layers (for a backend that takes one), and a real box's disk is formatted
(in its own process) while the base is built.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..box.backend import BOX_HOME, BOX_JOB_UID, BoxBackend, BoxLimits, BoxSpec
from ..box.etcgen import generate_etc
from ..box.userns import box_user_namespace
from ..rules import PROXY_ENV
from ..tasks import spawn
from .channels import AgentListener, BootServer
from .egress_listener import EgressListener
from .guest_link import GuestLink
from .recorder import RunRecorder

if TYPE_CHECKING:
    from .box import Box

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
    os.chown(box.runtime_dir, box.uid, box.uid)  # the box uid connects to its channel sockets
    os.chmod(box.runtime_dir, 0o700)
    boot = BootServer(box.runtime_dir / "boot.sock", box.uid, _boot_config(box, backend, layers))
    agent = AgentListener(box.runtime_dir / "agent.sock", box.uid)
    box.egress = EgressListener(box.runtime_dir / "egress.sock", box.uid,
                                lambda reader, writer: box.egress_handler(reader, writer))
    await boot.start()
    await agent.start()
    await box.egress.start()
    try:
        spec = BoxSpec(
            box_id=box.id, state_dir=box.layers.backend, base_dir=layers["base"],
            upper_dir=layers["upper"], work_dir=layers["work"], etc_dir=layers["etc"], box_uid=box.uid,
            job_uid=box.job_uid,
            channels={"boot": boot.path, "agent": agent.path, "egress": box.egress.path},
            guest_dir=box.manager.guest_dir,
            image_root=Path(box.settings.image[4:]) if box.settings.image.startswith("dir:") else None,
            limits=BoxLimits(memory_bytes=box.settings.limit("memory"), pids_max=box.settings.limit("pids"),
                             cpu_quota_us=box.settings.limit("cpus") * 100_000),
            disks_root=box.manager.config.paths.box_state_root, userns_fd=userns_fd,
        )
        box.process = await backend.start(spec, _guest_argv(box, backend, boot.path))
        reader, writer = await agent.wait(GUEST_CONNECT_TIMEOUT)
    finally:
        await boot.close()
        await agent.close()
    box.link = GuestLink(reader, writer, on_failure=box.guest_failed)
    await asyncio.wait_for(box.link.request("ping"), GUEST_CONNECT_TIMEOUT)


async def register_run(box: Box) -> None:
    """The box's run in the signer (``register_run`` and the must-keep ``tkbox.box``/``tkbox.task``), or the
    warning that this daemon records nothing."""
    if box.manager.signer is not None:
        box.recorder = RunRecorder(box.manager.signer, box.id, stop_box=box.stop_for_loss, on_event=box.emit)
        await box.recorder.register({"box_id": box.id, **box.settings.public()}, box.settings.task)
    else:
        box.emit("daemon.unrecorded", {"warning": "this daemon records nothing: no signer decides this box"})


def _prepare_layers(box: Box) -> dict[str, Path]:
    """The base copy and, for a real box, its own disk of ``limits.disk`` bytes for what it writes."""
    layers = {"base": box.layers.base, "upper": box.layers.upper, "work": box.layers.work,
              "etc": box.manager.etc_dir}
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


def _guest_argv(box: Box, backend: BoxBackend, boot_socket: Path) -> list[str]:
    if backend.isolated:
        return GUEST_ARGV
    # on a test host the guest's loopback is the host's: no forwarder listens there
    return [sys.executable, "-I", "-S", str(box.manager.guest_dir), "--boot-socket", str(boot_socket),
            "--no-forwarder"]
