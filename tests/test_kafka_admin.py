"""`kfs_core.kafka_admin` without a daemon: state names, the wait loop and its one-line errors.

`kfs groups` against a real daemon: tests/cli/test_groups.py; the KFS page's
read: tests/airflow/test_admin_hook.py and tests/airflow/test_kfs_page.py.
"""

from __future__ import annotations

import pickle
import time
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException

from kfs_core.kafka_admin import (
    STATE_NAMES,
    AdminError,
    BrokersDown,
    BrokerWatch,
    DaemonUnreachable,
    NoAnswer,
    rdkafka_state,
    state_name,
    wait_for,
)

pytestmark = pytest.mark.unit


def test_every_librdkafka_state_has_kafkas_name_and_back() -> None:
    for state in ConsumerGroupState:
        assert state.name in STATE_NAMES
        assert rdkafka_state(state_name(state).upper()) == state.name
    assert state_name(ConsumerGroupState.PREPARING_REBALANCING) == "PreparingRebalance"
    assert state_name("SOMETHING_NEW") == "Something_New"
    with pytest.raises(AdminError, match="unknown group state 'Sleeping'"):
        rdkafka_state("Sleeping")


def test_the_errors_read_as_one_line_and_cross_process_boundaries() -> None:
    down = BrokersDown("127.0.0.1:9092", "Connection refused")
    silent = NoAnswer("list groups", "127.0.0.1:9092", 2.5)
    assert str(down) == "cannot reach the daemon at 127.0.0.1:9092: Connection refused"
    assert str(silent) == "list groups: no answer from the daemon at 127.0.0.1:9092 within 2.5 s"
    for error in (down, silent):
        assert isinstance(error, DaemonUnreachable) and isinstance(error, AdminError)
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
    assert pickle.loads(pickle.dumps(silent)).timeout_s == 2.5


class _Future:
    def __init__(self, outcome: Any = None, *, done: bool = True) -> None:
        self.outcome = outcome
        self.is_done = done

    def done(self) -> bool:
        return self.is_done

    def result(self) -> Any:
        if isinstance(self.outcome, KafkaError):
            raise KafkaException(self.outcome)
        return self.outcome


class _Admin:
    """Polls; on the poll given, calls ``on_poll`` (a broker error, a finished request)."""

    def __init__(self, on_poll: Any = None) -> None:
        self.polls = 0
        self.on_poll = on_poll

    def poll(self, timeout: float) -> None:
        self.polls += 1
        if self.on_poll is not None:
            self.on_poll(self.polls)


def _wait(admin: _Admin, futures: dict[str, _Future], watch: BrokerWatch, timeout_s: float) -> Any:
    return wait_for(
        admin,
        futures,
        watch,
        what="list groups",
        bootstrap="127.0.0.1:1",
        deadline=time.monotonic() + timeout_s,
        timeout_s=timeout_s,
    )


def test_wait_for_hands_back_results_and_kafka_errors() -> None:
    error = KafkaError(KafkaError.GROUP_ID_NOT_FOUND)
    late = _Future("late", done=False)
    admin = _Admin(lambda n: setattr(late, "is_done", n >= 2))
    outcomes = _wait(admin, {"a": _Future("ok"), "b": _Future(error), "c": late}, BrokerWatch(), 5)
    assert outcomes == {"a": "ok", "b": error, "c": "late"}
    assert admin.polls == 2


def test_wait_for_gives_up_when_every_broker_is_down() -> None:
    watch = BrokerWatch()
    refused = KafkaError(KafkaError._TRANSPORT, "Connection refused")
    down = KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")
    admin = _Admin(lambda n: [watch(refused), watch(refused), watch(down)])
    with pytest.raises(BrokersDown) as raised:
        _wait(admin, {"": _Future(done=False)}, watch, 30)
    assert admin.polls == 1
    assert raised.value.why == f"{refused.str()}; {down.str()}"  # each error once


def test_wait_for_gives_up_at_the_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(NoAnswer, match=r"list groups: no answer from the daemon at 127\.0\.0\.1:1"):
        _wait(_Admin(), {"": _Future(done=False)}, BrokerWatch(), 0.2)
    assert time.monotonic() - started < 5
