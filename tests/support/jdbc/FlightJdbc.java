// Arrow's Flight SQL JDBC driver against the gateway, used as DBeaver and
// other JDBC tools use it (tests/it/venv/jdbc.rs compiles and runs this):
// the token as the password, DatabaseMetaData, a query, a prepared
// statement with parameters, a cancel. Prints one JSON object; the test
// compares its answers with DuckDB's.
//
// java FlightJdbc URL USER PASSWORD MODE [SQL PREPARED PARAM...]
//   MODE full: metadata, SQL, PREPARED with PARAMs ("long:5", "string:x",
//              "double:1.5", "date:2024-01-02"), then a cancel
//   MODE query: SQL only (over TLS, a wrong password)

import java.math.BigDecimal;
import java.sql.*;
import java.time.format.DateTimeFormatter;
import java.util.*;

public class FlightJdbc {
    static final DateTimeFormatter TS = DateTimeFormatter.ofPattern("yyyy-MM-dd HH:mm:ss");

    public static void main(String[] args) throws Exception {
        String url = args[0], mode = args[3];
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        StringBuilder out = new StringBuilder("{");
        try (Connection c = DriverManager.getConnection(url, props)) {
            if (mode.equals("query")) {
                field(out, "rows", rows(c.createStatement().executeQuery(args[4])));
            } else {
                DatabaseMetaData md = c.getMetaData();
                field(out, "product", quote(md.getDatabaseProductName()));
                field(out, "catalogs", rows(md.getCatalogs()));
                field(out, "schemas", rows(md.getSchemas()));
                field(out, "tables", rows(md.getTables(null, null, "%", null)));
                field(out, "columns", columns(md.getColumns(null, null, "%", null)));
                field(out, "table_types", rows(md.getTableTypes()));
                // A query, then a prepared statement with parameters, run twice.
                try (Statement s = c.createStatement()) {
                    ResultSet rs = s.executeQuery(args[4]);
                    field(out, "query_types", types(rs.getMetaData()));
                    field(out, "query", rows(rs));
                }
                try (PreparedStatement ps = c.prepareStatement(args[5])) {
                    StringBuilder runs = new StringBuilder("[");
                    for (int run = 0; run < 2; run++) {
                        for (int i = 6; i < args.length; i++) {
                            bind(ps, i - 5, args[i], run);
                        }
                        if (run > 0) runs.append(',');
                        runs.append(rows(ps.executeQuery()));
                    }
                    field(out, "prepared", runs.append(']').toString());
                }
                field(out, "cancel", cancel(c));
                // The connection serves the next query after the cancel.
                try (Statement s = c.createStatement()) {
                    field(out, "after_cancel", rows(s.executeQuery("SELECT 42 AS answer")));
                }
            }
        } catch (SQLException e) {
            field(out, "error", quote(e.getClass().getSimpleName() + ": " + e.getMessage()));
        }
        if (out.charAt(out.length() - 1) == ',') out.setLength(out.length() - 1);
        System.out.println(out.append('}'));
        // The driver's gRPC threads would keep the JVM alive a while.
        System.exit(0);
    }

    /// The second run binds each number plus one, to show the parameters
    /// really reach the statement.
    static void bind(PreparedStatement ps, int i, String p, int run) throws SQLException {
        String[] kv = p.split(":", 2);
        switch (kv[0]) {
            case "long": ps.setLong(i, Long.parseLong(kv[1]) + run); break;
            case "double": ps.setDouble(i, Double.parseDouble(kv[1]) + run); break;
            case "string": ps.setString(i, kv[1]); break;
            case "date": ps.setDate(i, java.sql.Date.valueOf(kv[1])); break;
            default: throw new IllegalArgumentException(p);
        }
    }

    /// A query of a trillion rows, cancelled from another thread while the
    /// client reads it (the driver cancels a statement by its result's
    /// stream): how long the cancel took, the rows read, what the reader saw.
    static String cancel(Connection c) throws Exception {
        Statement s = c.createStatement();
        String[] seen = new String[1];
        long[] rows = {0};
        Thread t = new Thread(() -> {
            try (ResultSet rs = s.executeQuery(
                    "SELECT i FROM range(1000000000000) t(i)")) {
                while (rs.next()) rows[0]++;
                seen[0] = "finished";
            } catch (SQLException | RuntimeException e) {
                // The driver's cancel surfaces as either.
                seen[0] = e.getClass().getSimpleName() + ": " + e.getMessage();
            }
        });
        t.start();
        Thread.sleep(2000);
        long t0 = System.nanoTime();
        s.cancel();
        t.join(60_000);
        long ms = (System.nanoTime() - t0) / 1_000_000;
        s.close();
        return "{\"ended\":" + !t.isAlive() + ",\"ms\":" + ms + ",\"rows\":" + rows[0]
            + ",\"seen\":" + quote(seen[0]) + "}";
    }

    static String columns(ResultSet rs) throws SQLException {
        StringBuilder b = new StringBuilder("[");
        while (rs.next()) {
            if (b.length() > 1) b.append(',');
            b.append('[').append(quote(rs.getString("TABLE_CAT"))).append(',')
                .append(quote(rs.getString("TABLE_SCHEM"))).append(',')
                .append(quote(rs.getString("TABLE_NAME"))).append(',')
                .append(quote(rs.getString("COLUMN_NAME"))).append(',')
                .append(quote(rs.getString("TYPE_NAME"))).append(',')
                .append(rs.getInt("ORDINAL_POSITION")).append(']');
        }
        rs.close();
        return b.append(']').toString();
    }

    static String types(ResultSetMetaData md) throws SQLException {
        StringBuilder b = new StringBuilder("[");
        for (int i = 1; i <= md.getColumnCount(); i++) {
            if (i > 1) b.append(',');
            b.append('[').append(quote(md.getColumnName(i))).append(',')
                .append(quote(md.getColumnTypeName(i))).append(']');
        }
        return b.append(']').toString();
    }

    static String rows(ResultSet rs) throws SQLException {
        StringBuilder b = new StringBuilder("[");
        int n = rs.getMetaData().getColumnCount();
        while (rs.next()) {
            if (b.length() > 1) b.append(',');
            b.append('[');
            for (int i = 1; i <= n; i++) {
                if (i > 1) b.append(',');
                b.append(value(rs, i));
            }
            b.append(']');
        }
        rs.close();
        return b.append(']').toString();
    }

    /// A value as JSON: numbers and booleans as such, decimals, dates and
    /// timestamps as text (timestamps without a fraction, in UTC).
    static String value(ResultSet rs, int i) throws SQLException {
        Object o = rs.getObject(i);
        if (o == null) return "null";
        if (o instanceof BigDecimal) return quote(((BigDecimal) o).toPlainString());
        if (o instanceof Number || o instanceof Boolean) return o.toString();
        if (o instanceof Timestamp) return quote(((Timestamp) o).toLocalDateTime().format(TS));
        if (o instanceof java.sql.Date) return quote(o.toString());
        return quote(o.toString());
    }

    static void field(StringBuilder out, String name, String json) {
        out.append(quote(name)).append(':').append(json).append(',');
    }

    static String quote(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            switch (ch) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
                    else b.append(ch);
            }
        }
        return b.append('"').toString();
    }
}
