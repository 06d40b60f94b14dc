"""The app's side of "A server" as its engine: the API key's storage and the server's summary.

The API key is a password, so it never goes into the settings JSON. With the optional
``keyring`` package it is kept in the operating system's keychain (Keychain, Credential
Manager, Secret Service); without it, only in memory until the app quits, and the settings
dialog says so.
"""

from __future__ import annotations

import logging

from s2studio.app.settings import AppSettings

log = logging.getLogger(__name__)

KEYRING_SERVICE = "s2studio server API key"


class ApiKeyStore:
    """API keys per server address: the OS keyring when ``keyring`` imports, else this session."""

    def __init__(self):
        self._session: dict[str, str] = {}
        try:
            import keyring
        except ImportError:
            keyring = None
        self._keyring = keyring

    @property
    def persistent(self) -> bool:
        return self._keyring is not None

    @property
    def note(self) -> str:
        if self.persistent:
            return "The key is kept in this computer's keychain."
        return ("The key is kept only until you quit s2studio (install the 'keyring' package to keep it in "
                "the system's keychain).")

    def get(self, url: str) -> str:
        url = url.strip()
        if url in self._session:
            return self._session[url]
        if self._keyring is not None and url:
            try:
                return self._keyring.get_password(KEYRING_SERVICE, url) or ""
            except Exception as exc:  # noqa: BLE001 - a locked or missing keychain backend
                log.warning("could not read the API key from the keychain: %s", exc)
        return ""

    def set(self, url: str, key: str) -> str | None:
        """Remember ``key`` for ``url`` ("" forgets it); a sentence if the keychain refused."""
        url, key = url.strip(), key.strip()
        if not url:
            return None
        self._session[url] = key
        if self._keyring is None:
            return None
        try:
            if key:
                self._keyring.set_password(KEYRING_SERVICE, url, key)
            elif self._keyring.get_password(KEYRING_SERVICE, url) is not None:
                self._keyring.delete_password(KEYRING_SERVICE, url)
        except Exception as exc:  # noqa: BLE001 - keep it for the session at least
            log.warning("could not store the API key in the keychain: %s", exc)
            return f"The API key could not be stored in the keychain ({exc}); it is kept until you quit."
        return None


def remote_settings(settings: AppSettings, keys: ApiKeyStore):
    """The worker's engine configuration when the engine is a server."""
    from s2studio.remote import RemoteSettings

    return RemoteSettings(settings.server_url.strip(), api_key=keys.get(settings.server_url) or None)


def describe_health(url: str, health: dict) -> str:
    """One line about a server from its ``/health``: model, device, queue."""
    queue = health.get("queue") if isinstance(health.get("queue"), dict) else {}
    model = health.get("model") or "a model"
    device = health.get("device") or "an unknown device"
    status = "ready" if health.get("model_loaded", True) else "still loading its model"
    line = f"{url}: {model} on {device}, {status}"
    if queue:
        line += f"; queue: {queue.get('running', 0)} running, {queue.get('waiting', 0)} waiting"
    return line
