"""A SQLAlchemy 2 dialect for duckgate's Arrow Flight SQL listener.

    engine = sqlalchemy.create_engine(
        "duckgate+flightsql://gateway:32010?token=s3cr3t-token-0123")
    pandas.read_sql("SELECT * FROM sales.orders WHERE id > ?", engine, params=(10,))

Statements go through ADBC's Flight SQL driver (``adbc-driver-flightsql``):
parameters are bound by a prepared statement, never written into the SQL
text, and a value the driver cannot send fails the call instead of reaching
the gateway as NULL. Every statement commits on its own (the gateway has no
transactions), so ``commit`` and ``rollback`` do nothing.

Names follow DuckDB's ``catalog.schema.table``: the schemas of the current
catalog (the gateway's database) are listed as themselves (``main``,
``sales``), those of other catalogs (named sources, lakes) as
``catalog.schema`` (``sources.main``, ``lake.main``), and a table reflected
or queried with such a schema is qualified with both, so what a listing shows
is what a query reaches. Column types are DuckDB's names, as the gateway's
metadata carries them.

URL options: ``token`` (the bearer token; else the URL's password), ``tls``
(``true``: ``grpc+tls``), ``tls_root_certs`` (a PEM file of the CA to
trust). The port defaults to 32010.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import types as sqltypes
from sqlalchemy.dialects.postgresql.base import PGCompiler, PGIdentifierPreparer, PGTypeCompiler
from sqlalchemy.engine import default, reflection
from sqlalchemy.engine.url import URL
from sqlalchemy.sql.elements import quoted_name

__all__ = ["DuckgateDialect"]

DEFAULT_PORT = 32010


class DuckgateIdentifierPreparer(PGIdentifierPreparer):
    """Quotes a ``catalog.schema`` schema as two names."""

    def quote_schema(self, schema: str) -> str:
        if "." in schema and not (isinstance(schema, quoted_name) and schema.quote):
            catalog, _, rest = schema.partition(".")
            return self.quote(catalog) + "." + self.quote(rest)
        return self.quote(schema)


_SIMPLE = {
    "BOOLEAN": sqltypes.Boolean,
    "TINYINT": sqltypes.SmallInteger,
    "SMALLINT": sqltypes.SmallInteger,
    "INTEGER": sqltypes.Integer,
    "BIGINT": sqltypes.BigInteger,
    "UTINYINT": sqltypes.SmallInteger,
    "USMALLINT": sqltypes.Integer,
    "UINTEGER": sqltypes.BigInteger,
    "UBIGINT": sqltypes.Numeric,
    "HUGEINT": sqltypes.Numeric,
    "UHUGEINT": sqltypes.Numeric,
    "FLOAT": sqltypes.Float,
    "DOUBLE": sqltypes.Double,
    "VARCHAR": sqltypes.String,
    "BLOB": sqltypes.LargeBinary,
    "DATE": sqltypes.Date,
    "TIME": sqltypes.Time,
    "TIMESTAMP": sqltypes.DateTime,
    "TIMESTAMP_S": sqltypes.DateTime,
    "TIMESTAMP_MS": sqltypes.DateTime,
    "TIMESTAMP_NS": sqltypes.DateTime,
    "INTERVAL": sqltypes.Interval,
    "UUID": sqltypes.Uuid,
    "JSON": sqltypes.JSON,
}


def column_type(name: str | None) -> sqltypes.TypeEngine:
    """The SQLAlchemy type of a DuckDB type name."""
    if not name:
        return sqltypes.NullType()
    name = name.strip().upper()
    if name.endswith("[]"):
        return sqltypes.ARRAY(column_type(name[:-2]))
    m = re.fullmatch(r"(?:DECIMAL|NUMERIC)\((\d+),\s*(\d+)\)", name)
    if m:
        return sqltypes.Numeric(int(m.group(1)), int(m.group(2)))
    if name in ("TIMESTAMP WITH TIME ZONE", "TIMESTAMPTZ"):
        return sqltypes.DateTime(timezone=True)
    if name in ("TIME WITH TIME ZONE", "TIMETZ"):
        return sqltypes.Time(timezone=True)
    simple = _SIMPLE.get(name)
    return simple() if simple else sqltypes.NullType()


class DuckgateDialect(default.DefaultDialect):
    name = "duckgate"
    driver = "flightsql"
    supports_statement_cache = True
    # ADBC's DB-API binds positional parameters through a prepared
    # statement (one DoPut row), whatever their type.
    paramstyle = "qmark"
    default_paramstyle = "qmark"
    positional = True
    supports_native_boolean = True
    supports_native_decimal = True
    supports_native_uuid = True
    supports_schemas = True
    supports_sane_rowcount = False
    supports_sane_multi_rowcount = False
    postfetch_lastrowid = False
    default_schema_name = "main"
    statement_compiler = PGCompiler
    type_compiler_cls = PGTypeCompiler
    preparer = DuckgateIdentifierPreparer

    @classmethod
    def import_dbapi(cls):
        import adbc_driver_flightsql.dbapi as dbapi

        return dbapi

    def create_connect_args(self, url: URL):
        import adbc_driver_flightsql as flightsql

        query = dict(url.query)
        token = query.pop("token", None) or url.password
        tls = str(query.pop("tls", "false")).lower() in ("1", "true", "on", "yes")
        roots = query.pop("tls_root_certs", None)
        if query:
            raise ValueError(f"unknown URL options: {', '.join(sorted(query))}")
        uri = f"{'grpc+tls' if tls else 'grpc'}://{url.host or 'localhost'}:{url.port or DEFAULT_PORT}"
        db_kwargs: dict[str, str] = {}
        if token:
            db_kwargs[flightsql.DatabaseOptions.AUTHORIZATION_HEADER.value] = "Bearer " + token
        if roots:
            with open(roots) as f:
                db_kwargs[flightsql.DatabaseOptions.TLS_ROOT_CERTS.value] = f.read()
        return [uri], {"db_kwargs": db_kwargs, "autocommit": True}

    # Every statement commits on its own.
    def do_begin(self, dbapi_connection):
        pass

    def do_commit(self, dbapi_connection):
        pass

    def do_rollback(self, dbapi_connection):
        pass

    def get_isolation_level(self, dbapi_connection):
        return "AUTOCOMMIT"

    def get_default_isolation_level(self, dbapi_conn):
        return "AUTOCOMMIT"

    def _get_server_version_info(self, connection):
        return None

    def _get_default_schema_name(self, connection):
        return "main"

    # Reflection, from the gateway's Flight SQL metadata (ADBC's GetObjects).

    @staticmethod
    def _adbc(connection):
        return connection.connection.dbapi_connection

    def _current_catalog(self, connection) -> str:
        info = connection.connection.info
        if "duckgate_catalog" not in info:
            adbc = self._adbc(connection)
            try:
                # The gateway's session options (Flight's GetSessionOptions).
                info["duckgate_catalog"] = adbc.adbc_current_catalog
            except Exception:
                # A gateway without them: DuckDB says.
                with adbc.cursor() as cur:
                    cur.execute("SELECT current_database()")
                    info["duckgate_catalog"] = cur.fetchone()[0]
        return info["duckgate_catalog"]

    def _split(self, connection, schema: str | None) -> tuple[str, str]:
        """The catalog and schema a SQLAlchemy schema name stands for."""
        if schema is None:
            return self._current_catalog(connection), self.default_schema_name
        if "." in schema:
            catalog, _, name = schema.partition(".")
            return catalog, name
        return self._current_catalog(connection), schema

    def _objects(self, connection, depth: str, catalog=None, schema=None, table=None, types=None):
        reader = self._adbc(connection).adbc_get_objects(
            depth=depth,
            catalog_filter=catalog,
            # Patterns (`_` matches any character): the listing is
            # narrowed by name here, exactly.
            db_schema_filter=schema,
            table_name_filter=table,
            table_types_filter=types,
        )
        return reader.read_all().to_pylist()

    def _tables(self, connection, schema, types, table=None, columns=False):
        catalog, name = self._split(connection, schema)
        found = []
        depth = "all" if columns else "tables"
        for c in self._objects(connection, depth, catalog, name, table, types):
            if c["catalog_name"] != catalog:
                continue
            for s in c["catalog_db_schemas"] or []:
                if s["db_schema_name"] != name:
                    continue
                for t in s["db_schema_tables"] or []:
                    if table is None or t["table_name"] == table:
                        found.append(t)
        return found

    @reflection.cache
    def get_schema_names(self, connection, **kw):
        current = self._current_catalog(connection)
        names = []
        for c in self._objects(connection, "db_schemas"):
            for s in c["catalog_db_schemas"] or []:
                if c["catalog_name"] == current:
                    names.append(s["db_schema_name"])
                else:
                    names.append(f'{c["catalog_name"]}.{s["db_schema_name"]}')
        return names

    @reflection.cache
    def get_table_names(self, connection, schema=None, **kw):
        return [t["table_name"] for t in self._tables(connection, schema, ["TABLE"])]

    @reflection.cache
    def get_view_names(self, connection, schema=None, **kw):
        return [t["table_name"] for t in self._tables(connection, schema, ["VIEW"])]

    def has_table(self, connection, table_name, schema=None, **kw):
        return bool(self._tables(connection, schema, None, table_name))

    @reflection.cache
    def get_columns(self, connection, table_name, schema=None, **kw):
        tables = self._tables(connection, schema, None, table_name, columns=True)
        if not tables:
            from sqlalchemy.exc import NoSuchTableError

            raise NoSuchTableError(table_name)
        out = []
        for col in sorted(tables[0]["table_columns"] or [], key=lambda c: c["ordinal_position"] or 0):
            out.append(
                {
                    "name": col["column_name"],
                    "type": column_type(col["xdbc_type_name"]),
                    "nullable": col["xdbc_nullable"] != 0,
                    "default": None,
                }
            )
        return out

    def get_pk_constraint(self, connection, table_name, schema=None, **kw):
        return {"constrained_columns": [], "name": None}

    def get_foreign_keys(self, connection, table_name, schema=None, **kw):
        return []

    def get_indexes(self, connection, table_name, schema=None, **kw):
        return []

    def get_unique_constraints(self, connection, table_name, schema=None, **kw):
        return []

    def get_check_constraints(self, connection, table_name, schema=None, **kw):
        return []

    def get_table_comment(self, connection, table_name, schema=None, **kw):
        return {"text": None}


dialect = DuckgateDialect
