"""The user-code boundary: whatever a policy or implementation does is named, bad input, never a
traceback, an exit of its choosing, or a Ctrl-C the user did not press."""

from __future__ import annotations

import os
import signal

import pytest

from crossattn_sizing.base import interrupts, usercode
from crossattn_sizing.base.errors import PolicyCallError
from crossattn_sizing.core.config import RunnerConfig
from crossattn_sizing.core.policies import PROBE_CONFIG, checked_widths
from crossattn_sizing.impl import impl_from_spec
from tests import unusable_policies as u

HOSTILE = {
    "exits_zero": "called sys.exit(0)",
    "exits_three": "called sys.exit(3)",
    "raises_system_exit_130": "called sys.exit(130)",
    "raises_keyboard_interrupt": "raised KeyboardInterrupt though no Ctrl-C was pressed",
    "raises_memory_error": "raised MemoryError",
    "recurses": "raised RecursionError",
    "raises_unprintable": "<message that cannot be printed>",
    "mutates_config": "changed the RunnerConfig it was given (max_num_encoder_input_tokens=None -> 1)",
    "mutates_group": "groups[1].block_size=16 -> 1",
    "huge": "a width is at most 2**40 entries",
    "digits": "a width of 16610 bits",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_policy_is_one_named_error_and_the_config_is_untouched(name: str) -> None:
    config = PROBE_CONFIG.replace()
    before = config.to_dict()
    with pytest.raises(PolicyCallError) as info:
        checked_widths(getattr(u, name), config)
    assert HOSTILE[name] in str(info.value) and name in str(info.value)
    assert config.to_dict() == before and config.groups[1].block_size == 16  # it only had a copy


def test_misbehaving_only_after_the_probe_is_caught_on_the_later_config() -> None:
    assert checked_widths(u.exits_zero_later, PROBE_CONFIG)
    later = PROBE_CONFIG.replace(max_model_len=1024)
    with pytest.raises(PolicyCallError, match=r"called sys.exit\(0\).*M=1024"):
        checked_widths(u.exits_zero_later, later)


def test_a_real_ctrl_c_during_a_policy_call_stays_the_users() -> None:
    """A SIGINT that arrives while the policy runs is the user's Ctrl-C, not the policy's doing."""

    def pressed(config: RunnerConfig) -> tuple[int, ...]:
        os.kill(os.getpid(), signal.SIGINT)
        raise AssertionError("SIGINT did not interrupt")  # pragma: no cover

    with interrupts.handling(), pytest.raises(KeyboardInterrupt):
        checked_widths(pressed, PROBE_CONFIG)


def test_where_nothing_records_sigint_a_keyboard_interrupt_is_taken_as_the_users() -> None:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            usercode.call(u.raises_keyboard_interrupt, PROBE_CONFIG, what="policy")
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_implementation_kernel_that_exits_is_named_and_one_that_raises_keeps_its_error() -> None:
    impl = impl_from_spec("tests.unusable_impls:ExitsInSlotMapping")
    with pytest.raises(PolicyCallError, match=r"ExitsInSlotMapping': slot_mapping called sys.exit\(0\)"):
        impl.slot_mapping(step=None, out=None)
    attention = impl_from_spec("tests.unusable_impls:InterruptsInAttention")
    with pytest.raises(PolicyCallError, match="paged_attention raised KeyboardInterrupt though no Ctrl-C"):
        attention.paged_attention(query=None, key_cache=None, value_cache=None, step=None)
    with pytest.raises(AttributeError):  # an ordinary exception is the kernel failing: a verdict, untouched
        attention.write_kv(key=None, value=None, key_cache=None, value_cache=None, step=None)


def test_error_lines_repeat_a_bounded_part_of_what_user_code_said() -> None:
    said = usercode.describe(ValueError("x" * 10_000_000))
    assert len(said) < usercode.MAX_SAID + 100 and "10000000 characters" in said
