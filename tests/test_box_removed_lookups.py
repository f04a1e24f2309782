"""A removed box leaves nothing behind in the daemon's lookups by box id, and its events stay readable by name."""

from __future__ import annotations

from tests.daemon_harness import make_workspace, running_daemon
from tkbox_daemon.boxes.removed_boxes import box_lookups, forget_removed_box

BOXES = 12


async def test_after_boxes_are_created_and_removed_no_lookup_holds_them(tmp_path):
    workspace = make_workspace(tmp_path)
    async with running_daemon(tmp_path, unrecorded=True, max_boxes=2) as daemon, daemon.client() as client:
        for index in range(BOXES):
            info = await client.create_box({"name": f"b{index}", "workspace": str(workspace)})
            assert box_lookups(daemon.manager)["boxes"] == 1
            await client.remove_box(info.id)
        assert box_lookups(daemon.manager) == {"boxes": 0, "approval_windows": 0, "events_box_dirs": 0,
                                               "events_box_files": 0}
        assert list(daemon.manager.registry.directory.glob("*.json")) == []
        assert await client.boxes() == []
        kinds = [event.kind for event in await client.stored_events(box="b3")]  # by name, after the box is gone
        assert kinds[0] == "box.created" and kinds[-1] == "box.removed"


async def test_a_box_not_removed_is_not_forgotten(tmp_path):
    async with running_daemon(tmp_path, unrecorded=True) as daemon, daemon.client() as client:
        info = await client.create_box({"name": "kept", "workspace": str(make_workspace(tmp_path))})
        forget_removed_box(daemon.manager, info.id)
        assert (await client.box("kept")).id == info.id and box_lookups(daemon.manager)["boxes"] == 1
