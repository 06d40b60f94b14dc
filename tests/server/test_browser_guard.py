"""Browser protections: what any web page the user visits can make the browser send to the
local server (DNS rebinding, cross-site form posts, CORS) is refused; curl-like clients and
the origins the operator allows keep working."""

from __future__ import annotations

import json

import pytest

SMALL = {"max_new_tokens": 2, "min_tokens_before_end": 2, "seed": 1}
PAGE = "https://evil.example"


def speech(server, api, body: bytes, content_type: str | None, headers=None):
    extra = {"Content-Type": content_type} if content_type is not None else {}
    return api.request(server, "POST", "/v1/audio/speech", body, {**extra, **(headers or {})})


def speech_json(**extra) -> bytes:
    return json.dumps({"input": "Hi.", **SMALL, **extra}).encode()


def assert_refused(reply, status: int, *words: str):
    assert reply.status == status, (reply.status, reply.body)
    assert reply.headers["content-type"] == "application/json"
    message = reply.json()["error"]
    if isinstance(message, dict):  # the OpenAI routes' shape
        message = message["message"]
    for word in words:
        assert word.lower() in message.lower(), message


# ---- DNS rebinding: the Host header ------------------------------------------------------------

@pytest.mark.parametrize("host", ["evil.example", "evil.example:3030", "127.0.0.1.evil.example", "localhost.evil"])
def test_foreign_host_is_refused(server, api, host):
    reply = api.generate(server, {"text": "x"}, params=SMALL, headers={"Host": host})
    assert_refused(reply, 403, "Host", "--allowed-hosts")
    assert_refused(api.request(server, "GET", "/voices", headers={"Host": host}), 403, "Host")


@pytest.mark.parametrize("host", ["localhost", "localhost:3030", "127.0.0.1", "LOCALHOST:1", "[::1]:3030", "[::1]"])
def test_loopback_names_are_accepted(server, api, host):
    assert api.request(server, "GET", "/voices", headers={"Host": host}).status == 200


def test_allowed_hosts(start_server, api):
    server = start_server(allowed_hosts=("studio.lan",))
    assert api.request(server, "GET", "/voices", headers={"Host": "studio.lan:3030"}).status == 200
    assert api.request(server, "GET", "/voices", headers={"Host": "other.lan"}).status == 403
    anyone = start_server(allowed_hosts=("*",))
    assert api.request(anyone, "GET", "/voices", headers={"Host": "other.lan"}).status == 200


# ---- cross-site requests: Origin and Sec-Fetch-Site --------------------------------------------

@pytest.mark.parametrize("origin", [PAGE, "null", "http://localhost:8080", "http://127.0.0.1:3030"])
def test_form_post_from_a_web_page_is_refused(server, api, origin):
    # multipart is what an HTML <form enctype="multipart/form-data"> sends without a preflight
    reply = api.generate(server, {"text": "x"}, params=SMALL, headers={"Origin": origin})
    assert_refused(reply, 403, "--allowed-origins")
    assert "access-control-allow-origin" not in reply.headers


def test_cross_site_request_without_origin_is_refused(server, api):
    reply = api.generate(server, {"text": "x"}, params=SMALL, headers={"Sec-Fetch-Site": "cross-site"})
    assert_refused(reply, 403)
    assert api.request(server, "GET", "/voices", headers={"Sec-Fetch-Site": "same-site"}).status == 403
    # typed into the address bar ("none") is the user, not a page
    assert api.request(server, "GET", "/voices", headers={"Sec-Fetch-Site": "none"}).status == 200


def test_refused_before_the_api_key_is_even_checked(start_server, api):
    server = start_server(api_key="s3cret")
    key = {"Authorization": "Bearer s3cret"}
    assert api.generate(server, {"text": "x"}, params=SMALL, headers={**key, "Origin": PAGE}).status == 403
    assert api.generate(server, {"text": "x"}, params=SMALL, headers={**key, "Host": "evil.example"}).status == 403
    reply = speech(server, api, speech_json(), "text/plain", key)
    assert_refused(reply, 415, "application/json")
    assert api.generate(server, {"text": "x"}, params=SMALL, headers=key).status == 200


# ---- content types a page can send without a preflight -----------------------------------------

@pytest.mark.parametrize("content_type", ["text/plain", "text/plain;charset=UTF-8",
                                          "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
                                          None])
def test_speech_takes_only_json(server, api, content_type):
    # Each of these is what a no-cors fetch or a form can send; None is a fetch of a typeless Blob.
    reply = speech(server, api, speech_json(), content_type)
    assert_refused(reply, 415, "application/json")


def test_speech_json_with_charset_is_fine(server, api):
    assert speech(server, api, speech_json(), "application/json; charset=utf-8").status == 200


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/json",
                                          None])
def test_generate_takes_only_multipart(server, api, content_type):
    body = b"text=hello&params=%7B%7D"
    headers = {"Content-Type": content_type} if content_type else {}
    reply = api.request(server, "POST", "/generate", body, headers)
    assert_refused(reply, 415, "multipart/form-data")


# ---- CORS for the origins the operator lists ---------------------------------------------------

def test_cors_for_an_allowed_origin(start_server, api):
    app_origin = "http://localhost:5173"
    server = start_server(allowed_origins=(app_origin,), api_key="k")
    preflight = api.request(server, "OPTIONS", "/v1/audio/speech", headers={
        "Origin": app_origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert preflight.status == 204  # no API key on a preflight: browsers never send one there
    h = preflight.headers
    assert h["access-control-allow-origin"] == app_origin and "Origin" in h["vary"]
    assert "POST" in h["access-control-allow-methods"]
    assert {"authorization", "content-type"} <= {x.strip().lower() for x in h["access-control-allow-headers"].split(",")}
    reply = speech(server, api, speech_json(response_format="pcm"), "application/json",
                   {"Origin": app_origin, "Authorization": "Bearer k"})
    assert reply.status == 200, reply.body
    assert reply.headers["access-control-allow-origin"] == app_origin
    assert "X-Audio-Sample-Rate" in reply.headers["access-control-expose-headers"]
    # a refusal the page must be able to read carries the headers too
    unauthorized = speech(server, api, speech_json(), "application/json", {"Origin": app_origin})
    assert unauthorized.status == 401 and unauthorized.headers["access-control-allow-origin"] == app_origin
    # the form shape is allowed for that origin too (s2.cpp's API from a web app)
    reply = api.generate(server, {"text": "x"}, params=SMALL, headers={"Origin": app_origin,
                                                                       "Authorization": "Bearer k"})
    assert reply.status == 200
    # other origins still get nothing
    other = api.request(server, "OPTIONS", "/generate", headers={"Origin": PAGE,
                                                                 "Access-Control-Request-Method": "POST"})
    assert_refused(other, 403)
    assert "access-control-allow-origin" not in other.headers


def test_no_cors_by_default(server, api):
    preflight = api.request(server, "OPTIONS", "/v1/audio/speech", headers={
        "Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST"})
    assert preflight.status == 403 and "access-control-allow-origin" not in preflight.headers
