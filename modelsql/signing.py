"""The user's code-signing key, kept outside every database, and the HMAC signatures made with it.

A database file is data that people share; some of what it holds is code (a Python program's stored
reference, a trainable's factory, a compiled TVM library). modelsql runs such code only when a signature
made with the key of the user running it says that user trusts it (:mod:`modelsql.engine.artifacts.trust`), in the
spirit of DuckDB's signed extensions: the key never enters a database, so a file made elsewhere cannot
carry a signature that verifies here.

The key is 32 random bytes, hex, in one file:

* ``$MODELSQL_KEY_FILE`` when set (a server's own key, a test's);
* else ``$XDG_CONFIG_HOME/modelsql/key`` (by default ``~/.config/modelsql/key``).

It is created on first use by a statement that signs (the folder with mode 0700, the file with mode 0600,
atomically: two processes creating it at once end with one key); verifying never creates it. On POSIX a
key file that others may read or write is refused, as ssh refuses such a private key.

A signature is HMAC-SHA256 (the standard library's :mod:`hmac`) over ``kind`` and the artifact's SHA-256
digest; the signing key is named by :attr:`Key.key_id` (the first 16 hex digits of SHA-256 of the key).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from modelsql.errors import OperationalError
from modelsql.xdg import config_home

__all__ = ["KEY_ENV", "Key", "key_path", "load_key", "signature_of", "verifies"]

KEY_ENV = "MODELSQL_KEY_FILE"
"""The environment variable naming the key file (else the user's config folder's ``modelsql/key``)."""

_KEY_BYTES = 32
_CONTEXT = b"modelsql-code-signature/1"


@dataclass(frozen=True)
class Key:
    """A signing key: ``secret`` (bytes), ``key_id`` (16 hex digits naming it), ``path`` (its file)."""

    secret: bytes
    key_id: str
    path: Path

    def __repr__(self) -> str:  # never print the secret
        return f"Key(key_id={self.key_id!r}, path={str(self.path)!r})"


def key_path() -> Path:
    """Where the key file is (``$MODELSQL_KEY_FILE``, else ``$XDG_CONFIG_HOME/modelsql/key``, else
    ``~/.config/modelsql/key``); the file may not exist yet."""
    given = os.environ.get(KEY_ENV)
    if given:
        return Path(given).expanduser()
    return Path(config_home()) / "modelsql" / "key"


def load_key(*, create: bool = False) -> Optional[Key]:
    """The user's key; None when its file does not exist and ``create`` is false.

    Raises:
        OperationalError: ``bad_key_file`` (unreadable, readable or writable by others, not 64 hex digits,
            or it cannot be created), naming the file.
    """
    path = key_path()
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        if not create:
            return None
        text = _create(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise _bad(path, f"cannot be read ({exc})") from None
    _check_mode(path)
    try:
        secret = bytes.fromhex(text.strip())
    except ValueError:
        secret = b""
    if len(secret) != _KEY_BYTES:
        raise _bad(path, f"does not hold a key ({_KEY_BYTES * 2} hex digits); move it away and a new key is made "
                         "on the next CREATE MODEL ... FROM PYTHON, COMPILE or TRUST MODEL")
    return Key(secret, hashlib.sha256(secret).hexdigest()[:16], path)


def signature_of(key: Key, kind: str, digest: str) -> str:
    """HMAC-SHA256 (hex) of ``kind`` and ``digest`` with ``key``."""
    message = b"\0".join((_CONTEXT, kind.encode(), digest.encode()))
    return hmac.new(key.secret, message, hashlib.sha256).hexdigest()


def verifies(key: Key, kind: str, digest: str, signature: str) -> bool:
    """Whether ``signature`` is ``key``'s signature of ``kind`` and ``digest`` (compared in constant time)."""
    return isinstance(signature, str) and hmac.compare_digest(signature_of(key, kind, digest), signature)


def _create(path: Path) -> str:
    """Write a new key to ``path`` atomically (a temporary file linked into place); the key text there after
    (another process's, when it won the race)."""
    text = secrets.token_bytes(_KEY_BYTES).hex() + "\n"
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".key-")  # mode 0600
        try:
            with os.fdopen(fd, "w", encoding="ascii") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.link(tmp, path)  # fails if a key appeared meanwhile: that one wins
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
        return path.read_text(encoding="ascii")
    except OSError as exc:
        raise _bad(path, f"cannot be created ({exc}); set {KEY_ENV} to a file you can write") from None


def _check_mode(path: Path) -> None:
    if os.name != "posix":
        return
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise _bad(path, f"is accessible by other users (mode {stat.S_IMODE(mode):o}); run chmod 600 {path}")


def _bad(path: Path, why: str) -> OperationalError:
    return OperationalError(f"The modelsql key file {path} {why}.", code="bad_key_file")
