"""Reading why a VM did not join from its console (domain/join_failures.py), on consoles cut
from real test-host boots."""

from __future__ import annotations

from provisioner.domain.join_failures import diagnose

BOOT = (
    "[  980.18] cloud-init[43]: Cloud-init v. 22.4.2 running 'init-local' at Sun, 06 Dec 2026\n"
    "[  981.38] cloud-init[122]: gpu-burst-join: instance i-0b8 is slurm node cloud-aws-1\n"
)


def test_the_last_failed_step_is_the_reason() -> None:
    console = BOOT + (
        "[  981.40] cloud-init[122]: gpu-burst-join: FAILED munge-key: SSM answered 400\n"
        "[  990.00] cloud-init[122]: gpu-burst-join: FAILED slurmd: munge key rejected\n"
        "[FAILED] Failed to start cloud-final.service\n"
    )
    assert diagnose(console) == "FAILED slurmd: munge key rejected"


def test_without_a_failure_the_last_word_says_how_far_it_got() -> None:
    assert diagnose(BOOT) == (
        "the join program's last word: instance i-0b8 is slurm node cloud-aws-1"
    )


def test_a_join_program_that_never_ran_is_told_by_cloud_init() -> None:
    console = (
        "[  9.1] cloud-init[43]: Cloud-init v. 22.4.2 running 'modules:final'\n"
        "\x1b[0;1;31m[  9.5] cloud-init[122]: 2026-12-06 01:51:50 - cc_scripts_user.py[WARNING]:"
        " Failed to run module scripts-user\x1b[0m\n"
        "Debian GNU/Linux 12 ip-10-77-0-5 ttyS0\n"
    )
    got = diagnose(console)
    assert got.startswith("the join program never ran; cloud-init:")
    assert "Failed to run module scripts-user" in got and "\x1b" not in got


def test_an_empty_console_says_nothing_and_a_quiet_one_says_so() -> None:
    assert diagnose("") == ""
    assert diagnose("Debian GNU/Linux 12 ip-10-77-0-5 ttyS0\n").startswith(
        "the join program never ran"
    )
