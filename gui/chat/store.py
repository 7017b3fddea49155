"""Conversations in SQLite (stdlib ``sqlite3``) in the user data dir.

Each answer keeps its token sources and stats, so a reopened answer is highlighted
as it was when it streamed.  Messages form a tree (``parent_id``): a regenerated answer
is a sibling of the old one under the same question, an edited question a sibling of
the old question; nothing is ever erased by either.  A conversation shows one path, from
its root to ``current_leaf``.  A reasoning model's answer keeps its thinking apart
(``reasoning``, ``reasoning_segments``), and a conversation its own options (``options``:
the thinking switch and budget it was last answered with).  Schema version 3 (``PRAGMA
user_version``); a version-1 file (a flat list of messages) is migrated in place on open,
each message the child of the one before it; a version-2 file gets the new columns.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from .message import CONTENT, REASONING, Message, Segment, stored_segments

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    created_at REAL NOT NULL,   -- seconds since the epoch
    updated_at REAL NOT NULL,
    current_leaf INTEGER,       -- the last message of the path shown
    options TEXT                -- JSON {"thinking": bool, "reasoning_budget": int}
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'chat',
    segments TEXT,              -- JSON list of Segment fields
    stats TEXT,                 -- JSON GenerationStats.to_dict()
    finish_reason TEXT,
    parent_id INTEGER,          -- the message this one follows; NULL for the first
    reasoning TEXT,             -- a reasoning model's thinking, apart from the answer (content)
    reasoning_segments TEXT     -- JSON list of Segment fields of the thinking
);
"""
SCHEMA_VERSION = 3
_NEW_COLUMNS = {  # version 3
    "conversations": ("options",),
    "messages": ("reasoning", "reasoning_segments"),
}


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
            self._migrate()
            self._db.execute(
                "SELECT id, title, created_at, updated_at, current_leaf, options FROM "
                "conversations LIMIT 1"
            )
            self._db.execute(
                "SELECT id, conversation_id, role, content, kind, segments, stats, finish_reason, "
                "parent_id, reasoning, reasoning_segments FROM messages LIMIT 1"
            )
        except sqlite3.Error:
            self._db.close()
            raise

    def _migrate(self) -> None:
        """Version 1 (no tree) to 2: each message the child of the one before it, the
        last one the conversation's current leaf; 2 to 3: the thinking's columns."""
        (version,) = self._db.execute("PRAGMA user_version").fetchone()
        if version >= SCHEMA_VERSION:
            return
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(messages)")}
        with self._db:
            for table, names in _NEW_COLUMNS.items():
                have = {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}
                for name in names:
                    if name not in have:
                        self._db.execute(f"ALTER TABLE {table} ADD COLUMN {name} TEXT")
            if "parent_id" not in columns:
                self._db.execute("ALTER TABLE messages ADD COLUMN parent_id INTEGER")
            if "current_leaf" not in {
                row[1] for row in self._db.execute("PRAGMA table_info(conversations)")
            }:
                self._db.execute("ALTER TABLE conversations ADD COLUMN current_leaf INTEGER")
            self._db.execute(
                "UPDATE messages SET parent_id = (SELECT MAX(p.id) FROM messages p WHERE "
                "p.conversation_id = messages.conversation_id AND p.id < messages.id) WHERE "
                "parent_id IS NULL"
            )
            self._db.execute(
                "UPDATE conversations SET current_leaf = (SELECT MAX(m.id) FROM messages m WHERE "
                "m.conversation_id = conversations.id) WHERE current_leaf IS NULL"
            )
            self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @classmethod
    def open_or_recover(cls, path: Path | str | None = None) -> tuple[ConversationStore, str]:
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
                return (
                    cls(path),
                    f"The conversation history could not be read; it was kept as {aside.name} "
                    "and a new one started.",
                )
            except (OSError, sqlite3.Error):
                pass
        except (OSError, sqlite3.Error):
            pass
        return (
            cls(":memory:"),
            f"Conversations cannot be saved in {path.parent}; this session's chats are kept in "
            "memory only.",
        )

    def close(self) -> None:
        self._db.close()

    def create(self, title: str = "New chat") -> int:
        now = time.time()
        with self._db:
            cur = self._db.execute(
                "INSERT INTO conversations (title, created_at, updated_at) VALUES (?, ?, ?)",
                (title, now, now),
            )
        return cur.lastrowid

    def list(self, query: str = "") -> list[ConversationInfo]:
        """Newest first; with ``query``, only those whose title or any message contains
        it (case-insensitive for ASCII, as SQLite's LIKE)."""
        query = query.replace("\x00", "")  # SQLite's LIKE would stop reading the pattern there
        if not query:
            rows = self._db.execute(
                "SELECT id, title, updated_at FROM conversations ORDER BY updated_at DESC, id DESC"
            )
        else:
            like = "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            rows = self._db.execute(
                "SELECT id, title, updated_at FROM conversations c WHERE title LIKE ?1 ESCAPE "
                "'\\' OR EXISTS "
                "(SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND m.content LIKE ?1 "
                "ESCAPE '\\') "
                "ORDER BY updated_at DESC, id DESC",
                (like,),
            )
        return [ConversationInfo(*row) for row in rows]

    def title(self, conversation_id: int) -> str | None:
        row = self._db.execute(
            "SELECT title FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        return row[0] if row else None

    def options(self, conversation_id: int) -> dict:
        """The options stored with a conversation (see :meth:`set_options`); {} when none
        were, or the stored JSON is damaged."""
        row = self._db.execute(
            "SELECT options FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        options = _stats(row[0]) if row else None
        return options or {}

    def set_options(self, conversation_id: int, options: dict) -> None:
        """Keep ``options`` (JSON-serialisable, e.g. ``{"thinking": True, "reasoning_budget": -1}``)
        with the conversation; they replace the ones stored before."""
        with self._db:
            self._db.execute(
                "UPDATE conversations SET options = ? WHERE id = ?",
                (json.dumps(options), conversation_id),
            )

    def rename(self, conversation_id: int, title: str) -> None:
        with self._db:
            self._db.execute(
                "UPDATE conversations SET title = ? WHERE id = ?", (title, conversation_id)
            )

    def delete(self, conversation_id: int) -> None:
        with self._db:
            self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def add_message(
        self, conversation_id: int, message: Message, parent_id: int | None | str = "leaf"
    ) -> int:
        """Store a message as the child of ``parent_id`` (default: the current leaf; None:
        a first message) and make it the current leaf; sets and returns ``message.id``."""
        if parent_id == "leaf":
            parent_id = self.current_leaf(conversation_id)
        with self._db:
            cur = self._db.execute(
                "INSERT INTO messages (conversation_id, role, content, kind, segments, stats, "
                "finish_reason, parent_id, "
                "reasoning, reasoning_segments) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    conversation_id,
                    message.role,
                    message.content,
                    message.kind,
                    json.dumps(message.segments_json()) if message.segments else None,
                    json.dumps(message.stats) if message.stats is not None else None,
                    message.finish_reason,
                    parent_id,
                    message.reasoning or None,
                    json.dumps(message.reasoning_segments_json())
                    if message.reasoning_segments
                    else None,
                ),
            )
            self._db.execute(
                "UPDATE conversations SET updated_at = ?, current_leaf = ? WHERE id = ?",
                (time.time(), cur.lastrowid, conversation_id),
            )
        message.id, message.parent_id = cur.lastrowid, parent_id
        return message.id

    def delete_message(self, message_id: int) -> None:
        """Remove a message that has no children (one that has is left alone); its parent
        becomes the current leaf where it was the leaf."""
        row = self._db.execute(
            "SELECT conversation_id, parent_id FROM messages WHERE id = ?", (message_id,)
        ).fetchone()
        if (
            row is None
            or self._db.execute(
                "SELECT 1 FROM messages WHERE parent_id = ?", (message_id,)
            ).fetchone()
        ):
            return
        with self._db:
            self._db.execute("DELETE FROM messages WHERE id = ?", (message_id,))
            self._db.execute(
                "UPDATE conversations SET current_leaf = ? WHERE id = ? AND current_leaf = ?",
                (row[1], row[0], message_id),
            )

    def current_leaf(self, conversation_id: int) -> int | None:
        row = self._db.execute(
            "SELECT current_leaf FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        return row[0] if row else None

    def _belongs(self, conversation_id: int, message_id: int) -> bool:
        return (
            self._db.execute(
                "SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?",
                (message_id, conversation_id),
            ).fetchone()
            is not None
        )

    def set_leaf(self, conversation_id: int, message_id: int | None) -> None:
        """Show the path ending at ``message_id`` (None: an empty path); an id that is not
        a message of this conversation is ignored."""
        if message_id is not None and not self._belongs(conversation_id, message_id):
            return
        with self._db:
            self._db.execute(
                "UPDATE conversations SET current_leaf = ? WHERE id = ?",
                (message_id, conversation_id),
            )

    def messages(self, conversation_id: int) -> list[Message]:
        """The path shown: root to current leaf, each message with ``versions`` set
        (its place among its siblings of the same role, and their number)."""
        rows = {
            r[0]: r
            for r in self._db.execute(
                "SELECT id, role, content, kind, segments, stats, finish_reason, parent_id, "
                "reasoning, "
                "reasoning_segments FROM messages WHERE conversation_id = ?",
                (conversation_id,),
            )
        }
        path, mid, seen = [], self.current_leaf(conversation_id), set()
        while (
            mid is not None and mid in rows and mid not in seen
        ):  # a damaged file may hold a cycle
            seen.add(mid)
            path.append(rows[mid])
            mid = rows[mid][7]
        out = []
        for (
            mid,
            role,
            content,
            kind,
            segments,
            stats,
            finish,
            parent,
            thinking,
            thinking_segments,
        ) in reversed(path):
            siblings = self.siblings(mid)
            out.append(
                Message(
                    role,
                    content,
                    _segments(segments),
                    _stats(stats),
                    finish,
                    kind,
                    mid,
                    parent,
                    (siblings.index(mid) + 1, len(siblings)),
                    thinking or "",
                    _segments(thinking_segments, REASONING),
                )
            )
        return out

    def siblings(self, message_id: int) -> list[int]:
        """Ids of the versions of a message, oldest first: the messages of its role and
        kind under the same parent (itself included)."""
        row = self._db.execute(
            "SELECT conversation_id, parent_id, role, kind FROM messages WHERE id = ?",
            (message_id,),
        ).fetchone()
        if row is None:
            return []
        cid, parent, role, kind = row
        rows = self._db.execute(
            "SELECT id FROM messages WHERE conversation_id = ? AND parent_id IS ? AND role = ? "
            "AND kind = ? ORDER BY id",
            (cid, parent, role, kind),
        )
        return [r[0] for r in rows]

    def switch_to(self, conversation_id: int, message_id: int) -> None:
        """Show ``message_id``'s version: the path through it, continued by the newest
        child at every step below it."""
        if not self._belongs(conversation_id, message_id):
            return
        leaf, seen = message_id, {message_id}
        while True:
            row = self._db.execute(
                "SELECT MAX(id) FROM messages WHERE conversation_id = ? AND parent_id = ?",
                (conversation_id, leaf),
            ).fetchone()
            if row[0] is None or row[0] in seen:  # no child, or a cycle in a damaged file
                break
            leaf = row[0]
            seen.add(leaf)
        self.set_leaf(conversation_id, leaf)


def _segments(text: str | None, channel: str = CONTENT) -> list[Segment]:
    """Stored token sources; none (plain text) when the stored JSON is damaged."""
    try:
        return stored_segments(json.loads(text), channel) if text else []
    except (ValueError, TypeError):
        return []


def _stats(text: str | None) -> dict | None:
    try:
        stats = json.loads(text) if text else None
    except ValueError:
        return None
    return stats if isinstance(stats, dict) else None
