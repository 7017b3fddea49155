"""Conversations in SQLite (stdlib ``sqlite3``) in the user data dir.

Each answer keeps its token sources and stats, so a reopened answer is highlighted
as it was when it streamed.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from .message import Message, Segment

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created_at REAL NOT NULL,   -- seconds since the epoch
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'chat',
    segments TEXT,              -- JSON list of Segment fields
    stats TEXT,                 -- JSON GenerationStats.to_dict()
    finish_reason TEXT
);
"""


@dataclass(frozen=True)
class ConversationInfo:
    id: int
    title: str
    updated_at: float  # seconds since the epoch


def default_db_path() -> Path:
    """``<user data dir>/localspec/conversations.sqlite3`` (``$XDG_DATA_HOME`` on Linux)."""
    return Path(platformdirs.user_data_dir("localspec")) / "conversations.sqlite3"


class ConversationStore:
    """Create, list, rename, delete conversations and append messages.  Raises
    ``sqlite3.Error`` / OSError when the database cannot be opened or written."""

    def __init__(self, path: Path | str | None = None):
        self.path = Path(path) if path is not None else default_db_path()
        if str(self.path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path))
        try:
            self._db.execute("PRAGMA foreign_keys = ON")
            self._db.executescript(_SCHEMA)
            self._db.execute("SELECT id, title, created_at, updated_at FROM conversations LIMIT 1")
            self._db.execute("SELECT id, conversation_id, role, content, kind, segments, stats, finish_reason "
                             "FROM messages LIMIT 1")
        except sqlite3.Error:
            self._db.close()
            raise

    @classmethod
    def open_or_recover(cls, path: Path | str | None = None) -> tuple["ConversationStore", str]:
        """Open the store; a file that is not a usable database is moved aside (renamed
        ``*.unreadable-<time>``) and a new one started, and a folder that cannot be
        written gives an in-memory store.  Returns (store, a sentence for the user, or "")."""
        path = Path(path) if path is not None else default_db_path()
        try:
            return cls(path), ""
        except sqlite3.DatabaseError:
            aside = path.with_name(f"{path.name}.unreadable-{time.strftime('%Y%m%d-%H%M%S')}")
            try:
                path.replace(aside)
                return cls(path), f"The conversation history could not be read; it was kept as {aside.name} and a new one started."
            except (OSError, sqlite3.Error):
                pass
        except (OSError, sqlite3.Error):
            pass
        return cls(":memory:"), f"Conversations cannot be saved in {path.parent}; this session's chats are kept in memory only."

    def close(self) -> None:
        self._db.close()

    def create(self, title: str = "New chat") -> int:
        now = time.time()
        with self._db:
            cur = self._db.execute("INSERT INTO conversations (title, created_at, updated_at) VALUES (?, ?, ?)",
                                   (title, now, now))
        return cur.lastrowid

    def list(self) -> list[ConversationInfo]:
        """Newest first."""
        rows = self._db.execute("SELECT id, title, updated_at FROM conversations ORDER BY updated_at DESC, id DESC")
        return [ConversationInfo(*row) for row in rows]

    def title(self, conversation_id: int) -> str | None:
        row = self._db.execute("SELECT title FROM conversations WHERE id = ?", (conversation_id,)).fetchone()
        return row[0] if row else None

    def rename(self, conversation_id: int, title: str) -> None:
        with self._db:
            self._db.execute("UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id))

    def delete(self, conversation_id: int) -> None:
        with self._db:
            self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def add_message(self, conversation_id: int, message: Message) -> int:
        """Store a message; sets and returns ``message.id``."""
        with self._db:
            cur = self._db.execute(
                "INSERT INTO messages (conversation_id, role, content, kind, segments, stats, finish_reason) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, message.role, message.content, message.kind,
                 json.dumps(message.segments_json()) if message.segments else None,
                 json.dumps(message.stats) if message.stats is not None else None, message.finish_reason))
            self._db.execute("UPDATE conversations SET updated_at = ? WHERE id = ?", (time.time(), conversation_id))
        message.id = cur.lastrowid
        return message.id

    def delete_message(self, message_id: int) -> None:
        with self._db:
            self._db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

    def messages(self, conversation_id: int) -> list[Message]:
        rows = self._db.execute(
            "SELECT id, role, content, kind, segments, stats, finish_reason FROM messages "
            "WHERE conversation_id = ? ORDER BY id", (conversation_id,))
        out = []
        for mid, role, content, kind, segments, stats, finish in rows:
            out.append(Message(role, content, _segments(segments), _stats(stats), finish, kind, mid))
        return out


def _segments(text: str | None) -> list[Segment]:
    """Stored token sources; none (plain text) when the stored JSON is damaged."""
    try:
        return [Segment(**s) for s in json.loads(text)] if text else []
    except (ValueError, TypeError):
        return []


def _stats(text: str | None) -> dict | None:
    try:
        stats = json.loads(text) if text else None
    except ValueError:
        return None
    return stats if isinstance(stats, dict) else None
