import GRDB

/// The statements on the paths every message, join and welcome takes are
/// written as SQL and compiled once per connection. GRDB's query interface
/// and record methods generate their SQL and compile a new statement on
/// every call; on the join path that cost more than the queries did
/// (measured with perf, ADR 0019). Cold paths keep the query interface.
extension Database {
    /// Runs one statement, compiled once per connection.
    func run(cached sql: String, _ arguments: StatementArguments = []) throws {
        try cachedStatement(sql: sql).execute(arguments: arguments)
    }

    func fetchOne<Record: FetchableRecord>(
        _: Record.Type, cached sql: String, _ arguments: StatementArguments = []
    ) throws -> Record? {
        try Record.fetchOne(cachedStatement(sql: sql), arguments: arguments)
    }

    func fetchAll<Record: FetchableRecord>(
        _: Record.Type, cached sql: String, _ arguments: StatementArguments = []
    ) throws -> [Record] {
        try Record.fetchAll(cachedStatement(sql: sql), arguments: arguments)
    }

    /// The first column of the first row (nil for no row or NULL).
    func fetchValue<Value: DatabaseValueConvertible & StatementColumnConvertible>(
        _: Value.Type, cached sql: String, _ arguments: StatementArguments = []
    ) throws -> Value? {
        try Value.fetchOne(cachedStatement(sql: sql), arguments: arguments)
    }
}
