"""``serve --style gym`` checked by NeMo Gym's own code: its request and answer models and its
HTTP client, from the nemo-gym package (the ``gym`` extra: Python 3.12 and later).

Gym ships no conformance test for a resources server; what decides whether one works with it is
what its agents do. A verify request is built with Gym's own pydantic models
(``BaseVerifyRequest`` with a task field, as its resources servers subclass it), serialized as
its ``ServerClient`` serializes one (``model_dump(exclude_unset=True)``), sent through its own
``request`` (its global aiohttp client, orjson, its retries), checked with its own
``raise_for_status``, and the answer read with its own ``get_response_json`` and validated as
its ``BaseVerifyResponse``, the model its agents validate a verify answer as; likewise
``/seed_session``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.serve._scorers import HANG
from tests.serve._server import serving

pytestmark = [
    pytest.mark.slow,
    pytest.mark.needs_extra("gym"),
    pytest.mark.needs_extra("serve"),
    pytest.mark.timeout(180),
]

BUDGET = 0.5
#: A hung sample is answered within its budget plus this, on a loaded two-core machine (a
#: correctness bound: Gym's client has no timeout at all).
SLACK = 5.0


def verify_request(text: str, expected: str) -> Any:
    """A verify request of Gym's own models, with a math task's ``expected_answer``."""
    from nemo_gym.base_resources_server import BaseVerifyRequest
    from nemo_gym.openai_utils import NeMoGymResponse, NeMoGymResponseCreateParamsNonStreaming

    # As Gym's math resources servers declare theirs (Any to mypy, which runs without Gym).
    class MathVerifyRequest(BaseVerifyRequest):  # type: ignore[misc]
        expected_answer: str

    params = NeMoGymResponseCreateParamsNonStreaming(
        input=[{"role": "user", "content": "What is 6 * 7?"}]
    )
    response = NeMoGymResponse(
        id="resp_1",
        created_at=time.time(),
        model="policy",
        object="response",
        output=[
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
        parallel_tool_calls=False,
        tool_choice="auto",
        tools=[],
    )
    return MathVerifyRequest(
        responses_create_params=params, response=response, expected_answer=expected
    )


async def gym_post(url: str, body: Any) -> Any:
    """POST ``body`` as Gym's ``ServerClient.post`` does, and the answer's JSON as it reads it."""
    from nemo_gym.server_utils import get_response_json, raise_for_status, request

    response = await request("POST", url, json=body.model_dump(exclude_unset=True))
    await raise_for_status(response)
    return await get_response_json(response)


def test_gyms_own_client_and_models_take_the_servers_answers() -> None:
    from nemo_gym.base_resources_server import (
        BaseSeedSessionRequest,
        BaseSeedSessionResponse,
        BaseVerifyResponse,
    )
    from nemo_gym.server_utils import (
        GlobalAIOHTTPAsyncClientConfig,
        global_aiohttp_client_exit,
        set_global_aiohttp_client,
    )

    async def scenario(base: str) -> tuple[Any, Any, Any, float]:
        client = set_global_aiohttp_client(GlobalAIOHTTPAsyncClientConfig())
        try:
            seeded = await gym_post(f"{base}/seed_session", BaseSeedSessionRequest())
            started = time.monotonic()
            good, hung = await asyncio.gather(
                gym_post(f"{base}/verify", verify_request("42", "42")),
                gym_post(f"{base}/verify", verify_request(f"{HANG} forever", "42")),
            )
            return seeded, good, hung, time.monotonic() - started
        finally:
            await client.close()  # on its own loop: its connections' sockets with it

    async def bounded(base: str) -> tuple[Any, Any, Any, float]:
        return await asyncio.wait_for(scenario(base), 120)

    with serving("--style", "gym", "--budget", str(BUDGET), "--workers", "2") as server:
        try:
            seeded, good, hung, took = asyncio.run(bounded(server.base))
        finally:
            global_aiohttp_client_exit()  # Gym forgets its global client (closed already)
    BaseSeedSessionResponse.model_validate(seeded)
    good_answer = BaseVerifyResponse.model_validate(good)
    hung_answer = BaseVerifyResponse.model_validate(hung)
    assert good_answer.reward == 1.0
    assert hung_answer.reward == 0.0
    assert (good["reward_status"], hung["reward_status"]) == ("ok", "timeout")
    # The request comes back whole, as Gym's agents expect it: the task's own field too.
    assert good_answer.response.output[0].content[0].text == "42"
    assert good["expected_answer"] == "42"
    assert took < BUDGET + SLACK, f"the hung sample took {took:.1f} s"
