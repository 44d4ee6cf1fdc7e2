"""Issue 58, "how it is shown": one attack of each class of ``bench.cost_attacks`` (answers nobody
reads, bodies held, crafted artifacts), its sizes and rates drawn from a seeded RNG at small
scale, against ``python -m tunemix.service`` with two workers while a steady client sends plain
100-document /rank requests. Each attack runs until its event (every attacker connection ended
at least once, by the server or after the attacker's hold; or the tampered version asked for a
number of times) and a number of steady answers; then: no worker lost, each worker's peak memory rise within
``bench.cost_attacks.memory_bound`` (documented in docs/service.md), and at least
``SERVED_FLOOR`` of the plain requests answered 200."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench.cost_attacks import SERVED_FLOOR, Steady, Target, draw, memory_bound, run_attack, verdict, vm
from tests.service.conftest import N_FEATURES, Store, copy_version
from tests.service.two_workers import TwoWorkers, start_two_workers
from tunemix.service.body import ANSWER_WRITTEN, Admission, AnswerBytes, BodyHold
from tunemix.service.settings import Settings

MIB = 2**20

TOKEN = "attack-test-token"
#: a body or an answer must move within this many seconds (the default is 5), and arrive or leave
#: whole within this many (the default is 30): the attacks' connections are cut sooner, the test is
#: shorter
STALL_S, TIMEOUT_S = "2", "6"
#: plain /rank answers each attack waits for at least (at 20 a second)
STEADY_ANSWERS = 40


@pytest.fixture(scope="module")
def served(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TwoWorkers, Target]]:
    base = tmp_path_factory.mktemp("attacks")
    models = base / "models"
    v1 = copy_version(store.default_v1, models, "default", "v1")
    server = start_two_workers(models, base, TUNEMIX_RELOAD_TOKEN=TOKEN, TUNEMIX_BODY_STALL_S=STALL_S,
                               TUNEMIX_BODY_TIMEOUT_S=TIMEOUT_S)
    settings = Settings(_env_file=None, reload_token=TOKEN, body_stall_s=float(STALL_S),
                        body_timeout_s=float(TIMEOUT_S))
    try:
        yield server, Target(server.url, settings, N_FEATURES, models, v1, TOKEN)
    finally:
        server.stop()


#: the seeds draw: 20 clients asking, in 82 KB bodies (small: the reserve lets them in), for answers
#: of 131,120 per-query values (596 queries of 64-character qids x 22 measures x 10 conventions)
#: and reading them just above the minimum rate; 8 bodies of 4 MiB held one byte short; a version
#: declaring 30,513 features
@pytest.mark.parametrize(("cls", "variant", "seed"), [("answers", "evaluate_per_query", 5),
                                                      ("held", "one_byte_short", 5),
                                                      ("artifacts", "width", 3)])
def test_an_attack_leaves_workers_memory_and_plain_rank(served: tuple[TwoWorkers, Target], cls: str, variant: str,
                                                        seed: int) -> None:
    server, target = served
    pids = server.worker_pids()
    assert len(pids) == 2
    resting = {p: vm(p, "VmRSS") for p in pids}
    desc, driver = draw(cls, variant, random.Random(seed), target, seed=seed)
    with Steady(target.url, target.n_features, rate=20) as steady:
        result: dict[str, Any] = run_attack(driver, steady, server.worker_pids, resting, memory_bound(target.settings),
                                            min_s=0, max_s=60, min_requests=STEADY_ANSWERS)
    summary = {"drawn": desc, **result}
    print(cls, variant, summary)  # shown with -s, and with a failure
    assert result["done_event_after_s"] is not None, summary  # the attack's event came
    assert result["workers_lost"] == 0 and result["workers_after"] == pids, summary
    assert result["within_memory_bound"], summary
    assert result["steady"]["fraction_200"] >= SERVED_FLOOR, summary
    assert verdict(result)
    if cls == "artifacts":
        assert not any(k.endswith("_200") for k in driver.seen if not k.startswith("models_reload")), summary
        assert any(k.endswith("_422") for k in driver.seen), summary
    elif cls == "held":  # every held body cut by the server (408, or 503 while the large bodies' share is full)
        assert driver.seen["reset"] + driver.seen["closed"] >= len(driver.conns), summary  # type: ignore[union-attr]


def test_the_bound_is_the_documented_one() -> None:
    text = " ".join((Path(__file__).resolve().parents[2] / "docs" / "service.md").read_text().split())
    assert ("resting size + 2 x 26 x `TUNEMIX_MAX_BODY_BYTES` + `TUNEMIX_MAX_INFLIGHT_BYTES` (224 MiB over it with "
            "the defaults)") in text
    assert memory_bound(Settings(_env_file=None)) == 224 * 2**20


def test_an_answer_past_the_inflight_bytes_is_dropped_unless_it_is_alone() -> None:
    """Unsent answers count as large bodies' bytes: one alone is kept whatever its size; another
    that would take the worker past its limit is refused (its connection reset), and small
    bodies keep their reserve whatever the answers hold."""
    adm = Admission(limit=16 * MIB, reserve=4 * MIB, small=128 * 1024)
    assert adm.hold_answer(40 * MIB)  # alone
    assert not adm.hold_answer(1)
    small = BodyHold(adm)
    small.take(100 * 1024)  # the reserve is the small bodies'
    adm.release_answer(40 * MIB)
    assert adm.hold_answer(10 * MIB) and adm.hold_answer(5 * MIB)
    assert not adm.hold_answer(2 * MIB)  # 10 + 5 + 2 MiB and the small body: past 16 MiB
    assert (adm.held, adm.large) == (15 * MIB + 100 * 1024, 15 * MIB)
    small.release()
    adm.release_answer(10 * MIB)
    adm.release_answer(5 * MIB)
    assert (adm.held, adm.large) == (0, 0)


def test_a_dropped_answer_is_counted_and_its_connection_reset() -> None:
    """``AnswerBytes`` tells the server to reset the connection (``count`` says False) and counts
    ``answer_dropped`` when the worker's unwritten answers leave no room for this one."""
    dropped: list[str] = []
    state = SimpleNamespace(admission=Admission(limit=16 * MIB, reserve=4 * MIB, small=128 * 1024),
                            metrics=SimpleNamespace(count_error=dropped.append))
    assert state.admission.hold_answer(15 * MIB)  # another client's answer, unwritten
    told: list[bool] = []

    async def written(count: Callable[[int], bool]) -> None:
        told.append(count(2 * MIB))  # what the transport still holds of this answer

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x" * 100})

    async def send(message: Any) -> None:
        pass

    scope = {"type": "http", "extensions": {ANSWER_WRITTEN: written}}
    asyncio.run(AnswerBytes(app, SimpleNamespace(state=state))(scope, None, send))
    assert told == [False] and dropped == ["answer_dropped"]
    assert state.admission.held == 15 * MIB  # nothing of the dropped answer counted, nothing released
