// A Java ShedLock node on PostgreSQL through a real JDBC driver (PgJDBC), for the mixed-fleet
// test in ../shedlock_compat.rs. It issues the statements of ShedLock's jdbc-template provider
// with `usingDbTime()` (PostgresSqlServerTimeStatementsSource), its named parameters bound in
// order with the values and types ShedLock binds (String, BigDecimal seconds), following
// StorageBasedLockProvider: the INSERT the first time a name is tried, the UPDATE after that,
// and an unlock by name and locked_by.
//
// Usage: java -cp <postgresql.jar>:<dir> ShedLockJdbcNode <jdbc url> <user> <password|-> <table>
//            <locked_by> <run millis> <names, comma-separated> <seed>
// Prints, on System.nanoTime() (CLOCK_MONOTONIC on Linux, like Rust's Instant):
//   START <nanos>
//   ACQ <n> <name> <call start nanos> <call end nanos> <at most ms> <at least ms>
//   REL <n> <call start nanos>
//   DONE <acquisitions> <attempts>
import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.util.HashSet;
import java.util.Properties;
import java.util.Random;
import java.util.Set;

public final class ShedLockJdbcNode {
    private static final String NOW = "timezone('utc', CURRENT_TIMESTAMP)";
    private static final String AT_MOST = NOW + " + make_interval(secs => ?)";

    private final Connection conn;
    private final String table;
    private final String lockedBy;
    private final Set<String> created = new HashSet<>();

    private ShedLockJdbcNode(Connection conn, String table, String lockedBy) {
        this.conn = conn;
        this.table = table;
        this.lockedBy = lockedBy;
    }

    private static BigDecimal seconds(long millis) {
        // PostgresSqlServerTimeStatementsSource.toSeconds
        return BigDecimal.valueOf(millis).scaleByPowerOfTen(-3);
    }

    private boolean insert(String name, long atMostMs) throws SQLException {
        // getInsertStatement(): VALUES(:name, lockAtMostFor, now, :lockedBy) ON CONFLICT (name)
        // DO UPDATE updateClause() -- :name, :lockAtMostForInterval, :lockedBy in that order.
        String sql = "INSERT INTO " + table + "(name, lock_until, locked_at, locked_by) VALUES(?, "
                + AT_MOST + ", " + NOW + ", ?) ON CONFLICT (name) DO UPDATE SET lock_until = "
                + AT_MOST + ", locked_at = " + NOW + ", locked_by = ? WHERE " + table
                + ".name = ? AND " + table + ".lock_until <= " + NOW;
        try (PreparedStatement s = conn.prepareStatement(sql)) {
            s.setString(1, name);
            s.setBigDecimal(2, seconds(atMostMs));
            s.setString(3, lockedBy);
            s.setBigDecimal(4, seconds(atMostMs));
            s.setString(5, lockedBy);
            s.setString(6, name);
            return s.executeUpdate() > 0;
        }
    }

    private boolean update(String name, long atMostMs) throws SQLException {
        String sql = "UPDATE " + table + " SET lock_until = " + AT_MOST + ", locked_at = " + NOW
                + ", locked_by = ? WHERE " + table + ".name = ? AND " + table + ".lock_until <= " + NOW;
        try (PreparedStatement s = conn.prepareStatement(sql)) {
            s.setBigDecimal(1, seconds(atMostMs));
            s.setString(2, lockedBy);
            s.setString(3, name);
            return s.executeUpdate() > 0;
        }
    }

    private boolean lock(String name, long atMostMs) throws SQLException {
        boolean won = (!created.contains(name) && insert(name, atMostMs)) || update(name, atMostMs);
        created.add(name);
        return won;
    }

    private void unlock(String name, long atLeastMs) throws SQLException {
        String atLeast = "locked_at + make_interval(secs => ?)";
        String sql = "UPDATE " + table + " SET lock_until = CASE WHEN " + atLeast + " > " + NOW
                + " THEN " + atLeast + " ELSE " + NOW + " END WHERE name = ? AND locked_by = ?";
        try (PreparedStatement s = conn.prepareStatement(sql)) {
            s.setBigDecimal(1, seconds(atLeastMs));
            s.setBigDecimal(2, seconds(atLeastMs));
            s.setString(3, name);
            s.setString(4, lockedBy);
            s.executeUpdate();
        }
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 8) {
            System.err.println("usage: ShedLockJdbcNode <jdbc url> <user> <password|-> <table> "
                    + "<locked_by> <run millis> <names> <seed>");
            System.exit(2);
        }
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        if (!args[2].equals("-")) {
            props.setProperty("password", args[2]);
        }
        long runNanos = Long.parseLong(args[5]) * 1_000_000L;
        String[] names = args[6].split(",");
        Random random = new Random(Long.parseLong(args[7]));
        try (Connection conn = DriverManager.getConnection(args[0], props)) {
            conn.setAutoCommit(true);
            ShedLockJdbcNode node = new ShedLockJdbcNode(conn, args[3], args[4]);
            long began = System.nanoTime();
            System.out.println("START " + began);
            int acquired = 0;
            int attempts = 0;
            long atMostMs = 300;
            while (System.nanoTime() - began < runNanos) {
                String name = names[attempts % names.length];
                attempts++;
                long atLeastMs = random.nextInt(3) == 0 ? 60 : 0;
                long start = System.nanoTime();
                if (node.lock(name, atMostMs)) {
                    long end = System.nanoTime();
                    int n = acquired++;
                    System.out.println("ACQ " + n + " " + name + " " + start + " " + end + " "
                            + atMostMs + " " + atLeastMs);
                    Thread.sleep(random.nextInt(40));
                    // One in eight holders "crashes": its lock ends by lockAtMostFor.
                    if (random.nextInt(8) != 0) {
                        System.out.println("REL " + n + " " + System.nanoTime());
                        node.unlock(name, atLeastMs);
                    }
                }
                Thread.sleep(3);
            }
            System.out.println("DONE " + acquired + " " + attempts);
        }
    }
}
