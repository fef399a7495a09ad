// Command bidrivers drives duckgate's PostgreSQL door as Grafana's
// PostgreSQL data source does, with its two Go drivers
// (tests/it/venv/pg_door_bi.rs):
//
//   - grafana: github.com/jackc/pgx/v5 as Grafana's current backend uses it:
//     a pgxpool, the health check `Pool.Ping` (an empty simple query,
//     "-- ping"), every query through `PgConn().Exec` (the simple protocol,
//     text results) and each value decoded by its type oid into the Go type
//     Grafana's frames hold (int2/4/8 as integers, float4/8 and numeric as
//     float64, bool, timestamp/timestamptz/date as time, the rest as text);
//   - pgx: the same driver's default, `Conn.Query`: the extended protocol,
//     statements prepared and described, binary results, parameters;
//   - pq: github.com/lib/pq through database/sql (Grafana's older backend):
//     `DB.Ping` (";"), a query without arguments in the simple protocol, one
//     with arguments in the extended protocol, text results.
//
// Usage: bidrivers HOST:PORT USER PASSWORD < queries.json, where
// queries.json is [{"name", "sql", "args"?}]. It prints one JSON object:
// {"DRIVER": {"health": "ok" or the error, "queries": {NAME: {"columns",
// "types", "rows"} or {"error", "code"}}}}. A value is JSON null, a
// boolean, a number, a string, {"us": microseconds since the epoch} for a
// time, or {"hex": ...} for bytes, so the test compares it with DuckDB's.
package main

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/lib/pq"
)

type query struct {
	Name string `json:"name"`
	SQL  string `json:"sql"`
	Args []any  `json:"args"`
}

type answer struct {
	Columns []string `json:"columns,omitempty"`
	Types   []string `json:"types,omitempty"`
	Formats []string `json:"formats,omitempty"`
	Rows    [][]any  `json:"rows"`
	Error   string   `json:"error,omitempty"`
	Code    string   `json:"code,omitempty"`
}

type report struct {
	Health  string            `json:"health"`
	Queries map[string]answer `json:"queries"`
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: bidrivers HOST:PORT USER PASSWORD < queries.json")
		os.Exit(2)
	}
	addr, user, password := os.Args[1], os.Args[2], os.Args[3]
	var queries []query
	if err := json.NewDecoder(os.Stdin).Decode(&queries); err != nil {
		fmt.Fprintln(os.Stderr, "queries:", err)
		os.Exit(2)
	}
	host, port, err := splitAddr(addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	url := fmt.Sprintf("postgres://%s:%s@%s:%s/ops?sslmode=disable", user, password, host, port)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out := map[string]report{
		"grafana": grafana(ctx, url, queries),
		"pgx":     pgxExtended(ctx, url, queries),
		"pq":      libpq(ctx, url, queries),
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func splitAddr(addr string) (string, string, error) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:], nil
		}
	}
	return "", "", fmt.Errorf("no port in %q", addr)
}

// failed is the answer of a query that failed: the message and, when the
// server sent one, its SQLSTATE.
func failed(err error) answer {
	a := answer{Error: err.Error(), Rows: [][]any{}}
	var pgErr *pgconn.PgError
	var pqErr *pq.Error
	if errors.As(err, &pgErr) {
		a.Code = pgErr.Code
	} else if errors.As(err, &pqErr) {
		a.Code = string(pqErr.Code)
	}
	return a
}

func health(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// grafana runs the queries as Grafana's pgx backend does.
func grafana(ctx context.Context, url string, queries []query) report {
	r := report{Queries: map[string]answer{}}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		r.Health = err.Error()
		return r
	}
	defer pool.Close()
	r.Health = health(pool.Ping(ctx))
	m := pgtype.NewMap()
	for _, q := range queries {
		if len(q.Args) > 0 {
			continue
		}
		c, err := pool.Acquire(ctx)
		if err != nil {
			r.Queries[q.Name] = failed(err)
			continue
		}
		results, err := c.Conn().PgConn().Exec(ctx, q.SQL).ReadAll()
		c.Release()
		if err != nil {
			r.Queries[q.Name] = failed(err)
			continue
		}
		r.Queries[q.Name] = grafanaFrame(m, results)
	}
	return r
}

// grafanaFrame is the first result's rows, each value decoded as Grafana's
// frame conversion decodes it.
func grafanaFrame(m *pgtype.Map, results []*pgconn.Result) answer {
	a := answer{Rows: [][]any{}}
	for _, res := range results {
		if !res.CommandTag.Select() {
			continue
		}
		for _, fd := range res.FieldDescriptions {
			a.Columns = append(a.Columns, fd.Name)
			a.Types = append(a.Types, typeName(m, fd.DataTypeOID))
		}
		for _, raw := range res.Rows {
			row := make([]any, len(raw))
			for i, fd := range res.FieldDescriptions {
				v, err := grafanaValue(m, fd, raw[i])
				if err != nil {
					return failed(err)
				}
				row[i] = v
			}
			a.Rows = append(a.Rows, row)
		}
		break
	}
	return a
}

func typeName(m *pgtype.Map, oid uint32) string {
	if t, ok := m.TypeForOID(oid); ok {
		return t.Name
	}
	return strconv.FormatUint(uint64(oid), 10)
}

// scan decodes raw into a new T by the plan pgx has for the column.
func scan[T any](m *pgtype.Map, fd pgconn.FieldDescription, raw []byte) (*T, error) {
	var v *T
	err := m.PlanScan(fd.DataTypeOID, fd.Format, &v).Scan(raw, &v)
	return v, err
}

func grafanaValue(m *pgtype.Map, fd pgconn.FieldDescription, raw []byte) (any, error) {
	if raw == nil {
		return nil, nil
	}
	switch fd.DataTypeOID {
	case pgtype.Int2OID:
		v, err := scan[int16](m, fd, raw)
		return deref(v), err
	case pgtype.Int4OID:
		v, err := scan[int32](m, fd, raw)
		return deref(v), err
	case pgtype.Int8OID:
		v, err := scan[int64](m, fd, raw)
		return deref(v), err
	case pgtype.NumericOID, pgtype.Float8OID, pgtype.Float4OID:
		v, err := scan[float64](m, fd, raw)
		return deref(v), err
	case pgtype.BoolOID:
		v, err := scan[bool](m, fd, raw)
		return deref(v), err
	case pgtype.TimestampOID, pgtype.TimestamptzOID, pgtype.DateOID:
		v, err := scan[time.Time](m, fd, raw)
		if err != nil || v == nil {
			return nil, err
		}
		return norm(*v), nil
	default:
		v, err := scan[string](m, fd, raw)
		return deref(v), err
	}
}

func deref[T any](v *T) any {
	if v == nil {
		return nil
	}
	return *v
}

// pgxExtended runs the queries with pgx's default mode: prepared,
// described, binary results.
func pgxExtended(ctx context.Context, url string, queries []query) report {
	r := report{Queries: map[string]answer{}}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		r.Health = err.Error()
		return r
	}
	defer conn.Close(ctx)
	r.Health = health(conn.Ping(ctx))
	for _, q := range queries {
		rows, err := conn.Query(ctx, q.SQL, q.Args...)
		if err != nil {
			r.Queries[q.Name] = failed(err)
			continue
		}
		a := answer{Rows: [][]any{}}
		for _, fd := range rows.FieldDescriptions() {
			a.Columns = append(a.Columns, fd.Name)
			a.Types = append(a.Types, typeName(conn.TypeMap(), fd.DataTypeOID))
			format := "text"
			if fd.Format == pgx.BinaryFormatCode {
				format = "binary"
			}
			a.Formats = append(a.Formats, format)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				break
			}
			row := make([]any, len(vals))
			for i, v := range vals {
				row[i] = norm(v)
			}
			a.Rows = append(a.Rows, row)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			a = failed(err)
		}
		r.Queries[q.Name] = a
	}
	return r
}

// libpq runs the queries through database/sql over lib/pq.
func libpq(ctx context.Context, url string, queries []query) report {
	r := report{Queries: map[string]answer{}}
	db, err := sql.Open("postgres", url)
	if err != nil {
		r.Health = err.Error()
		return r
	}
	defer db.Close()
	r.Health = health(db.PingContext(ctx))
	for _, q := range queries {
		r.Queries[q.Name] = pqQuery(ctx, db, q)
	}
	return r
}

func pqQuery(ctx context.Context, db *sql.DB, q query) answer {
	rows, err := db.QueryContext(ctx, q.SQL, q.Args...)
	if err != nil {
		return failed(err)
	}
	defer rows.Close()
	cols, err := rows.ColumnTypes()
	if err != nil {
		return failed(err)
	}
	a := answer{Rows: [][]any{}}
	for _, c := range cols {
		a.Columns = append(a.Columns, c.Name())
		a.Types = append(a.Types, c.DatabaseTypeName())
	}
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return failed(err)
		}
		row := make([]any, len(cols))
		for i, v := range vals {
			row[i] = pqValue(cols[i].DatabaseTypeName(), v)
		}
		a.Rows = append(a.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return failed(err)
	}
	return a
}

// pqValue: lib/pq hands text it does not decode itself (numeric) as
// bytes; read as Grafana's converters read it.
func pqValue(typ string, v any) any {
	b, ok := v.([]byte)
	if !ok {
		return norm(v)
	}
	switch typ {
	case "NUMERIC":
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			return string(b)
		}
		return f
	case "BYTEA":
		return map[string]string{"hex": hex.EncodeToString(b)}
	default:
		return string(b)
	}
}

// norm makes a driver's value comparable with DuckDB's.
func norm(v any) any {
	switch x := v.(type) {
	case time.Time:
		return map[string]int64{"us": x.UnixMicro()}
	case pgtype.Numeric:
		f, err := x.Float64Value()
		if err != nil || !f.Valid {
			return nil
		}
		return f.Float64
	case []byte:
		return map[string]string{"hex": hex.EncodeToString(x)}
	default:
		return v
	}
}
