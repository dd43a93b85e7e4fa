"""Voice quotas a client cannot mint (issue #37 M5): one client filled the 500-voice store by
rotating self-chosen X-Voice-Owner keys (499 voices under 24 made-up keys; a new visitor then
got 507). Quotas now count per client address and per owner key the server issued (signed by
its secret, carrying the address it was issued to); a self-chosen key lists, uses and deletes
what it saved, but registers nothing over /v1, and on the page (address unknown) all such
keys share one issuer's quota.
"""

from __future__ import annotations

import httpx
import pytest
from test_openai_api import RecordingEngine, assert_error, serve
from test_voice_registry import FEMALE_CLIP, TRANSCRIPT

from tts_core.server.access import OwnerKeys
from tts_core.server.voices import VoiceRegistry, VoiceStoreError

OTHER_VISITOR = "127.0.0.2"  # Linux routes all of 127/8 to loopback


def private_app(engine, root, per_owner: int = 2, per_address: int = 3):  # noqa: ANN001, ANN201
    from fastapi import FastAPI

    from tts_core.server import ApiConfig, install_routes

    registry = VoiceRegistry(root, private=True, max_per_owner=per_owner)
    registry.max_per_address = per_address  # a small share: the test fills it
    app = FastAPI()
    install_routes(app, engine, registry, ApiConfig())
    return app, registry


def register(client: httpx.Client, url: str, name: str, key: str | None) -> httpx.Response:
    headers = {"X-Voice-Owner": key} if key else {}
    with open(FEMALE_CLIP, "rb") as clip:
        return client.post(
            f"{url}/v1/audio/voices",
            data={"name": name},
            headers=headers,
            files={"file": ("c.wav", clip, "audio/wav")},
        )


def issued(client: httpx.Client, url: str, held: str | None = None) -> str:
    headers = {"X-Voice-Owner": held} if held else {}
    answer = client.post(f"{url}/v1/audio/voices/owner_key", headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()["owner_key"]


def test_rotating_keys_over_v1_fills_one_addresses_share_not_the_store(espeak_backend, tmp_path):
    app, registry = private_app(RecordingEngine(espeak_backend), tmp_path / "voices")
    registry.register("page-voice", str(FEMALE_CLIP), TRANSCRIPT, owner_key="a-browsers-own-key-01")
    other_transport = httpx.HTTPTransport(local_address=OTHER_VISITOR)
    with (
        serve(app) as url,
        httpx.Client(timeout=60) as me,
        httpx.Client(timeout=60, transport=other_transport) as other,
    ):
        # a key the client made up registers nothing (before: 201, under any key it liked)
        made_up = register(me, url, "mine-0", "made-up-key-number-0")
        assert assert_error(made_up, 403, "X-Voice-Owner")["code"] == "owner_key_not_issued"
        # issued keys, each one new: the owner's share (2), then the address's (3)
        first, second, third = (issued(me, url) for _ in range(3))
        assert len({first, second, third}) == 3
        assert register(me, url, "mine-1", first).status_code == 201
        assert register(me, url, "mine-2", first).status_code == 201
        owner_full = assert_error(register(me, url, "mine-3", first), 429)
        assert "browser already keeps 2" in owner_full["message"]
        assert register(me, url, "mine-4", second).status_code == 201
        address_full = assert_error(register(me, url, "mine-5", third), 429)
        assert address_full["code"] == "voice_quota_reached"
        assert "address already keeps 3" in address_full["message"]
        # another visitor still saves its own
        assert register(other, url, "theirs", issued(other, url)).status_code == 201
        # a key whose address tag or signature was changed is not the server's
        tampered = first[:4] + ("0" if first[4] != "0" else "1") + first[5:]
        assert_error(register(other, url, "forged", tampered), 403, "X-Voice-Owner")
        # a browser's earlier self-made key, kept inside an issued one, still owns its voices
        upgraded = issued(other, url, held="a-browsers-own-key-01")
        listed = other.get(f"{url}/v1/audio/voices", headers={"X-Voice-Owner": upgraded}).json()
        assert "page-voice" in [voice["id"] for voice in listed["data"]]
        assert issued(other, url, held=upgraded) == upgraded  # an issued key is kept as it is
    names = [voice.name for voice in registry.list() if voice.kind == "custom"]
    assert sorted(names) == ["mine-1", "mine-2", "mine-4", "page-voice", "theirs"]


def test_self_made_keys_with_no_known_address_share_one_quota(tmp_path):
    """The page's path while it sends a self-made key and no address: every such key counts
    against one shared issuer, so rotating them cannot fill the store; a key the server
    issued (to an address) has its own share, and the operator only the store's bound."""
    registry = VoiceRegistry(tmp_path, private=True, max_voices=10, max_per_owner=2)
    registry.max_per_address = 3
    for i in range(3):
        registry.register(f"v{i}", str(FEMALE_CLIP), TRANSCRIPT, owner_key=f"rotated-key-{i:08d}")
    with pytest.raises(VoiceStoreError, match="address already keeps 3") as full:
        registry.register("v3", str(FEMALE_CLIP), TRANSCRIPT, owner_key="rotated-key-00000003")
    assert full.value.status == 429
    key = registry.issue_owner_key("203.0.113.5")
    registry.register("issued-1", str(FEMALE_CLIP), TRANSCRIPT, owner_key=key)
    registry.register(
        "by-address",
        str(FEMALE_CLIP),
        TRANSCRIPT,
        owner_key="rotated-key-09",
        address="198.51.100.7",
    )
    registry.register("operator", str(FEMALE_CLIP), TRANSCRIPT)  # no owner: no share
    assert registry.get("issued-1").owned_by(key)


def test_issued_keys_outlive_a_restart_and_cannot_be_forged(tmp_path):
    first = VoiceRegistry(tmp_path)
    key = first.issue_owner_key("192.0.2.1", keep="a-browsers-own-key-01")
    assert VoiceRegistry(tmp_path).is_issued(key)  # the secret is kept in the store's folder
    assert (tmp_path / ".owner-key-secret").stat().st_mode & 0o077 == 0
    assert not OwnerKeys(b"another server's secret").parse(key)
    assert not first.is_issued(key.replace("a-browsers", "b-browsers"))
    assert not first.is_issued("a-browsers-own-key-01")
    assert [v.name for v in first.list() if v.kind == "custom"] == []  # not a voice


def test_the_pages_save_counts_against_its_visitors_address(tmp_path):
    """The page saves in a Gradio event; Gradio keeps the event's request in a context
    variable, so its self-made keys count against the visitor's address, not a bucket shared
    with every other visitor: a real event (gradio_client from 127.0.0.1) and one set by hand
    for another address."""
    from types import SimpleNamespace

    import gradio as gr
    from gradio.context import LocalContext
    from gradio_client import Client

    registry = VoiceRegistry(tmp_path, private=True, max_per_owner=2)
    registry.max_per_address = 2

    def save(name: str, key: str) -> str:
        try:
            registry.register(name, str(FEMALE_CLIP), TRANSCRIPT, owner_key=key)
        except VoiceStoreError as exc:
            return f"refused {exc.status}"
        return "saved"

    with gr.Blocks() as blocks:
        name, key, note = gr.Textbox(), gr.Textbox(), gr.Textbox()
        gr.Button().click(save, [name, key], note, api_name="save")
    blocks.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True)
    try:
        client = Client(blocks.local_url, verbose=False)
        answers = [
            client.predict(f"p{i}", f"rotated-page-key-{i:04d}", api_name="/save") for i in range(3)
        ]
    finally:
        blocks.close()
    assert answers == ["saved", "saved", "refused 429"]
    loopback = registry.owner_keys.issuer_tag("127.0.0.1")
    assert {v.issuer for v in registry.list() if v.kind == "custom"} == {loopback}
    token = LocalContext.request.set(SimpleNamespace(client=SimpleNamespace(host="198.51.100.1")))
    try:
        assert save("elsewhere", "rotated-page-key-0009") == "saved"
    finally:
        LocalContext.request.reset(token)
    assert registry.get("elsewhere").issuer == registry.owner_keys.issuer_tag("198.51.100.1")
