"""The documents store: one SQLite file holding named collections, their files, passages, keyword index and vectors.

Owns the schema and every statement against it. Does not own reading, cutting or embedding (the callers pass
passages and vectors in) nor ranking fusion (retrieve.py).

Why SQLite: the history already lives in it, it ships with Python, and one file in the data folder is one thing to
back up or delete. Keywords: an FTS5 table over segmented text (keywords.py says why segmented), ranked by bm25.
Vectors: float32 blobs in a plain table, searched by brute-force cosine in numpy. sqlite-vec was the first choice, but
it is a loadable extension and this Python's sqlite3 (like python.org's macOS builds) is compiled without
``enable_load_extension``, so it cannot be relied on. Brute force over normalized float32 is one matrix product:
100,000 passages × 384 dimensions is 150 MB and tens of milliseconds, enough for a desktop's documents. Nothing is
pickled: a vector is its raw little-endian float32 bytes with its dimension and model name beside it.

Writes for one file happen in one transaction, so a file is either wholly indexed or as it was, whatever fails.
A collection remembers the folders and files it was given (``sources``), so re-indexing it walks them again: new
files come in, changed ones are read again, vanished ones leave. ``read_only`` opens the file for listing without
writing anything (the window lists collections while its engine thread indexes into the same file).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from engine.docs import keywords
from engine.docs.chunking import Passage, estimate_tokens
from engine.errors import BadInputError, CollectionNotFoundError, DataDirError, printable

SCHEMA_VERSION = "1"
DEFAULT_COLLECTION = "default"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS collections (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    id INTEGER PRIMARY KEY,
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL, sha256 TEXT NOT NULL, size INTEGER NOT NULL, kind TEXT NOT NULL,
    pages INTEGER NOT NULL, indexed_at REAL NOT NULL,
    UNIQUE (collection_id, path));
CREATE TABLE IF NOT EXISTS passages (
    id INTEGER PRIMARY KEY,
    file_id INTEGER NOT NULL REFERENCES files(id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL, page INTEGER, heading TEXT NOT NULL, text TEXT NOT NULL, tokens INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS passages_file ON passages(file_id);
CREATE TABLE IF NOT EXISTS vectors (
    passage_id INTEGER PRIMARY KEY REFERENCES passages(id) ON DELETE CASCADE,
    model TEXT NOT NULL, dim INTEGER NOT NULL, vector BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS sources (
    collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
    path TEXT NOT NULL, UNIQUE (collection_id, path));
CREATE VIRTUAL TABLE IF NOT EXISTS passages_fts USING fts5(terms, tokenize = 'porter unicode61 remove_diacritics 2');
"""


@dataclass(frozen=True)
class CollectionInfo:
    name: str
    files: int
    passages: int
    bytes: int  # the files' sizes on disk when indexed
    vectors: int  # passages with a vector (of any model)


@dataclass(frozen=True)
class StoredPassage:
    id: int
    path: str
    page: int | None
    heading: str
    text: str
    collection: str


class DocumentStore:
    """The store at ``path`` (created with its folder if missing; ``read_only``: opened only to read, never created,
    ``DataDirError`` when missing). Use as a context manager or ``close()``."""

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = Path(path)
        if read_only:
            try:
                self._db = sqlite3.connect(f"{self.path.absolute().as_uri()}?mode=ro", uri=True, timeout=30)
                self._db.execute("SELECT 1 FROM collections LIMIT 1")
            except sqlite3.Error as exc:
                raise DataDirError(f"the documents store {printable(self.path)} cannot be read ({exc})") from None
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # 30 s: the window's background indexer and a CLI run may write at once; WAL lets readers go on.
            self._db = sqlite3.connect(self.path, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL under WAL: a commit is not synced to disk, a checkpoint is. The file is never corrupted; a power
            # cut may lose the last files' commits, which the next add reads again (their hash is not stored). Each
            # file being its own transaction, FULL made a folder of small files fsync-bound: measured side by side,
            # 3,000 small files indexed at 173 files/s with FULL and 1,020 with NORMAL (5.9×, docs/DOCUMENTS.md).
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._db.executescript(_SCHEMA)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema', ?)", (SCHEMA_VERSION,))
            self._db.commit()
        except sqlite3.DatabaseError as exc:
            raise DataDirError(f"the documents store {printable(self.path)} cannot be opened ({exc}): move it away "
                               "and add the documents again") from None
        except OSError as exc:
            raise DataDirError(f"cannot create the documents store {printable(self.path)} "
                               f"({exc.strerror or type(exc).__name__})") from None

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> DocumentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- collections

    def collection_id(self, name: str, *, create: bool = False) -> int:
        """The id of collection ``name``; with ``create`` it is made if missing, else ``CollectionNotFoundError``."""
        if not name.strip():
            raise BadInputError("a collection name cannot be empty")
        row = self._db.execute("SELECT id FROM collections WHERE name = ?", (name,)).fetchone()
        if row:
            return int(row[0])
        if not create:
            raise CollectionNotFoundError(f"no collection named {printable(name)}: `engine docs list` shows them")
        with self._db:
            cursor = self._db.execute("INSERT INTO collections (name, created) VALUES (?, ?)", (name, time.time()))
        return int(cursor.lastrowid)

    def collections(self) -> list[CollectionInfo]:
        rows = self._db.execute("""
            SELECT c.name,
                   (SELECT COUNT(*) FROM files f WHERE f.collection_id = c.id),
                   (SELECT COUNT(*) FROM passages p JOIN files f ON p.file_id = f.id WHERE f.collection_id = c.id),
                   (SELECT COALESCE(SUM(size), 0) FROM files f WHERE f.collection_id = c.id),
                   (SELECT COUNT(*) FROM vectors v JOIN passages p ON v.passage_id = p.id
                        JOIN files f ON p.file_id = f.id WHERE f.collection_id = c.id)
            FROM collections c ORDER BY c.name""").fetchall()
        return [CollectionInfo(*row) for row in rows]

    def add_sources(self, collection: int, paths: Sequence[str]) -> None:
        """Remember that ``paths`` (absolute folders or files) were added to ``collection``."""
        with self._db:
            self._db.executemany("INSERT OR IGNORE INTO sources (collection_id, path) VALUES (?, ?)",
                                 [(collection, path) for path in paths])

    def sources(self, name: str) -> list[str]:
        """The folders and files added to collection ``name``, to walk again on a re-index; a collection made before
        they were remembered gives its files."""
        collection = self.collection_id(name)
        rows = self._db.execute("SELECT path FROM sources WHERE collection_id = ? ORDER BY path", (collection,))
        return [row[0] for row in rows] or self.file_paths(collection)

    def remove_collection(self, name: str) -> None:
        """Remove collection ``name`` and everything indexed in it (the files on disk are not touched)."""
        collection = self.collection_id(name)
        with self._db:
            self._db.execute("""DELETE FROM passages_fts WHERE rowid IN (SELECT p.id FROM passages p
                                JOIN files f ON p.file_id = f.id WHERE f.collection_id = ?)""", (collection,))
            self._db.execute("DELETE FROM collections WHERE id = ?", (collection,))

    # ---------------------------------------------------------------- files

    def file_hash(self, collection: int, path: str) -> str | None:
        """The sha256 the file at ``path`` had when indexed in ``collection``, None when it is not."""
        row = self._db.execute("SELECT sha256 FROM files WHERE collection_id = ? AND path = ?",
                               (collection, path)).fetchone()
        return row[0] if row else None

    def file_paths(self, collection: int) -> list[str]:
        return [row[0] for row in self._db.execute(
            "SELECT path FROM files WHERE collection_id = ? ORDER BY path", (collection,))]

    def put_file(self, collection: int, path: str, *, sha256: str, size: int, kind: str, pages: int,
                 passages: Sequence[Passage], vectors: np.ndarray | None = None, model: str | None = None) -> None:
        """Make ``path``'s entry in ``collection`` hold these passages (and their vectors, one row each), replacing
        what it held, in one transaction."""
        if vectors is not None and (model is None or len(vectors) != len(passages)):
            raise ValueError("one vector per passage, with the model that made them")
        with self._db:
            self._forget(collection, path)
            file_id = self._db.execute(
                "INSERT INTO files (collection_id, path, sha256, size, kind, pages, indexed_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (collection, path, sha256, size, kind, pages, time.time())).lastrowid
            for i, passage in enumerate(passages):
                passage_id = self._db.execute(
                    "INSERT INTO passages (file_id, ordinal, page, heading, text, tokens) VALUES (?, ?, ?, ?, ?, ?)",
                    (file_id, passage.ordinal, passage.page, passage.heading, passage.text,
                     estimate_tokens(passage.text))).lastrowid
                self._db.execute("INSERT INTO passages_fts (rowid, terms) VALUES (?, ?)",
                                 (passage_id, keywords.index_text(f"{passage.heading}\n{passage.text}")))
                if vectors is not None:
                    self._put_vector(passage_id, vectors[i], model or "")

    def forget_file(self, collection: int, path: str) -> bool:
        """Remove ``path`` from ``collection``; False when it was not there."""
        with self._db:
            return self._forget(collection, path)

    def _forget(self, collection: int, path: str) -> bool:
        row = self._db.execute("SELECT id FROM files WHERE collection_id = ? AND path = ?",
                               (collection, path)).fetchone()
        if not row:
            return False
        self._db.execute("DELETE FROM passages_fts WHERE rowid IN (SELECT id FROM passages WHERE file_id = ?)",
                         (row[0],))
        self._db.execute("DELETE FROM files WHERE id = ?", (row[0],))
        return True

    # ---------------------------------------------------------------- vectors

    def _put_vector(self, passage_id: int, vector: np.ndarray, model: str) -> None:
        data = np.ascontiguousarray(vector, dtype="<f4")  # (dim,) little-endian float32, whatever the machine
        self._db.execute("INSERT OR REPLACE INTO vectors (passage_id, model, dim, vector) VALUES (?, ?, ?, ?)",
                         (passage_id, model, int(data.shape[0]), data.tobytes()))

    def passages_without_vectors(self, collection: int, model: str) -> list[StoredPassage]:
        """Passages of ``collection`` with no vector from ``model`` (indexed before it was installed, or by another)."""
        rows = self._db.execute(f"""{_SELECT_PASSAGE} WHERE f.collection_id = ? AND NOT EXISTS
            (SELECT 1 FROM vectors v WHERE v.passage_id = p.id AND v.model = ?) ORDER BY p.id""",
                                (collection, model)).fetchall()
        return [StoredPassage(*row) for row in rows]

    def put_vectors(self, ids: Sequence[int], vectors: np.ndarray, model: str) -> None:
        with self._db:
            for passage_id, vector in zip(ids, vectors, strict=True):
                self._put_vector(passage_id, vector, model)

    # ---------------------------------------------------------------- search

    def keyword_search(self, query: str, collections: Iterable[int], limit: int) -> list[tuple[int, float]]:
        """(passage id, bm25 score: higher is better) for ``query`` in ``collections``, best first."""
        expression = keywords.match_expression(query)
        ids = list(collections)
        if expression is None or not ids:
            return []
        marks = ",".join("?" * len(ids))
        # bm25() is lower for better matches; it is negated so every score in this module grows with relevance.
        rows = self._db.execute(f"""
            SELECT passages_fts.rowid, -bm25(passages_fts) FROM passages_fts
            JOIN passages p ON p.id = passages_fts.rowid JOIN files f ON f.id = p.file_id
            WHERE passages_fts MATCH ? AND f.collection_id IN ({marks})
            ORDER BY bm25(passages_fts) LIMIT ?""", (expression, *ids, limit)).fetchall()
        return [(int(row[0]), float(row[1])) for row in rows]

    def dense_search(self, vector: np.ndarray, model: str, collections: Iterable[int],
                     limit: int) -> list[tuple[int, float]]:
        """(passage id, cosine similarity) of the passages embedded by ``model`` nearest ``vector`` (normalized)."""
        ids = list(collections)
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self._db.execute(f"""
            SELECT v.passage_id, v.vector FROM vectors v JOIN passages p ON p.id = v.passage_id
            JOIN files f ON f.id = p.file_id WHERE v.model = ? AND v.dim = ? AND f.collection_id IN ({marks})""",
                                (model, int(vector.shape[0]), *ids)).fetchall()
        if not rows:
            return []
        matrix = np.frombuffer(b"".join(row[1] for row in rows), dtype="<f4").reshape(len(rows), -1)  # (n, dim)
        scores = matrix @ vector.astype(np.float32)  # (n,): cosine, both sides normalized
        top = np.argsort(-scores)[:limit]
        return [(int(rows[i][0]), float(scores[i])) for i in top]

    def passages(self, ids: Sequence[int]) -> dict[int, StoredPassage]:
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        rows = self._db.execute(f"{_SELECT_PASSAGE} WHERE p.id IN ({marks})", tuple(ids)).fetchall()
        return {row[0]: StoredPassage(*row) for row in rows}


_SELECT_PASSAGE = """SELECT p.id, f.path, p.page, p.heading, p.text, c.name FROM passages p
    JOIN files f ON f.id = p.file_id JOIN collections c ON c.id = f.collection_id"""
