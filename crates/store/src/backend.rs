//! The two database engines behind one connection type: embedded SQLite
//! (rusqlite) and a PostgreSQL server (the synchronous `postgres` client).
//! `Db` and its modules write their SQL once, in the subset both understand,
//! with `?1`-style placeholders; this module turns them into `$1` for
//! PostgreSQL, binds values of one dynamic type (`Val`, converted to each
//! parameter's declared type so a boolean column takes 0/1 and a REAL column an
//! integer), reads rows back into `Val`s, and runs transactions.
//!
//! Invariants: a transaction is committed only when its closure succeeded, and
//! rolled back otherwise (also when the closure panicked: the next transaction
//! finds the connection clean); on PostgreSQL a transaction that lost a
//! deadlock or a serialization conflict is run again from the start (its
//! closure must therefore be repeatable: it only talks to the database);
//! SQLite write transactions take the write lock up front (`BEGIN IMMEDIATE`),
//! so two writers wait on the busy timeout instead of failing to upgrade.

use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::fmt::Write as _;

/// Which engine a connection talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// One SQL value, as both engines store it. Booleans are integers (0/1), as
/// SQLite keeps them; PostgreSQL's BOOLEAN columns convert both ways.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Val {
    fn kind(&self) -> &'static str {
        match self {
            Val::Null => "null",
            Val::Int(_) => "an integer",
            Val::Real(_) => "a real",
            Val::Text(_) => "text",
            Val::Blob(_) => "bytes",
        }
    }
}

impl From<i64> for Val {
    fn from(v: i64) -> Val {
        Val::Int(v)
    }
}
impl From<u64> for Val {
    /// Counts beyond i64 do not occur (pages, bytes); they saturate.
    fn from(v: u64) -> Val {
        Val::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<bool> for Val {
    fn from(v: bool) -> Val {
        Val::Int(v as i64)
    }
}
impl From<f64> for Val {
    fn from(v: f64) -> Val {
        Val::Real(v)
    }
}
impl From<&str> for Val {
    fn from(v: &str) -> Val {
        Val::Text(v.to_string())
    }
}
impl From<String> for Val {
    fn from(v: String) -> Val {
        Val::Text(v)
    }
}
impl From<&String> for Val {
    fn from(v: &String) -> Val {
        Val::Text(v.clone())
    }
}
impl From<Vec<u8>> for Val {
    fn from(v: Vec<u8>) -> Val {
        Val::Blob(v)
    }
}
impl<T: Into<Val>> From<Option<T>> for Val {
    fn from(v: Option<T>) -> Val {
        v.map_or(Val::Null, Into::into)
    }
}

/// `vals![a, b, c]`: a parameter list.
#[macro_export]
#[doc(hidden)]
macro_rules! vals {
    ($($x:expr),* $(,)?) => { vec![$($crate::backend::Val::from($x)),*] };
}

/// A result row: typed getters that name the column on a mismatch.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(pub Vec<Val>);

impl Row {
    fn at(&self, i: usize) -> Result<&Val> {
        self.0
            .get(i)
            .with_context(|| format!("the query returned no column {i}"))
    }
    pub fn int(&self, i: usize) -> Result<i64> {
        match self.at(i)? {
            Val::Int(v) => Ok(*v),
            v => bail!("column {i}: expected an integer, found {}", v.kind()),
        }
    }
    pub fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        match self.at(i)? {
            Val::Null => Ok(None),
            _ => self.int(i).map(Some),
        }
    }
    pub fn real(&self, i: usize) -> Result<f64> {
        match self.at(i)? {
            Val::Real(v) => Ok(*v),
            Val::Int(v) => Ok(*v as f64),
            v => bail!("column {i}: expected a number, found {}", v.kind()),
        }
    }
    pub fn opt_real(&self, i: usize) -> Result<Option<f64>> {
        match self.at(i)? {
            Val::Null => Ok(None),
            _ => self.real(i).map(Some),
        }
    }
    pub fn text(&self, i: usize) -> Result<String> {
        match self.at(i)? {
            Val::Text(v) => Ok(v.clone()),
            v => bail!("column {i}: expected text, found {}", v.kind()),
        }
    }
    pub fn opt_text(&self, i: usize) -> Result<Option<String>> {
        match self.at(i)? {
            Val::Null => Ok(None),
            _ => self.text(i).map(Some),
        }
    }
    pub fn bool(&self, i: usize) -> Result<bool> {
        Ok(self.int(i)? != 0)
    }
    pub fn blob(&self, i: usize) -> Result<Vec<u8>> {
        match self.at(i)? {
            Val::Blob(v) => Ok(v.clone()),
            v => bail!("column {i}: expected bytes, found {}", v.kind()),
        }
    }
    /// The value itself (export).
    pub fn val(&self, i: usize) -> Result<Val> {
        self.at(i).cloned()
    }
}

pub(crate) struct Pg {
    client: postgres::Client,
    /// Prepared once per connection: a look-up is one round trip, not two.
    statements: HashMap<String, postgres::Statement>,
    /// A transaction was begun and not yet ended (a panic may leave one open:
    /// the next begin rolls it back first).
    open: bool,
}

pub(crate) enum Conn {
    Sqlite(rusqlite::Connection),
    Pg(Box<Pg>),
}

/// `?N` placeholders as PostgreSQL's `$N`, outside quoted strings and identifiers.
pub(crate) fn pg_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quote: Option<char> = None;
    let mut it = sql.chars().peekable();
    while let Some(c) = it.next() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
                out.push(c);
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '?' && it.peek().is_some_and(|d| d.is_ascii_digit()) => out.push('$'),
            None => out.push(c),
        }
    }
    out
}

impl rusqlite::ToSql for Val {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Val::Null => ValueRef::Null,
            Val::Int(v) => ValueRef::Integer(*v),
            Val::Real(v) => ValueRef::Real(*v),
            Val::Text(v) => ValueRef::Text(v.as_bytes()),
            Val::Blob(v) => ValueRef::Blob(v),
        }))
    }
}

type BoxError = Box<dyn std::error::Error + Sync + Send>;

impl postgres::types::ToSql for Val {
    /// The value as the parameter's declared type: the server infers it from
    /// the column or expression, and SQLite's loose typing is what callers
    /// write to (an integer for a boolean or a real, a number for text).
    fn to_sql(
        &self,
        ty: &postgres::types::Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres::types::IsNull, BoxError> {
        use postgres::types::{IsNull, Type};
        let bad = || -> BoxError { format!("cannot store {} as {ty}", self.kind()).into() };
        match self {
            Val::Null => Ok(IsNull::Yes),
            Val::Int(v) => match *ty {
                Type::INT8 => v.to_sql(ty, out),
                Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*v)?.to_sql(ty, out),
                Type::BOOL => (*v != 0).to_sql(ty, out),
                Type::FLOAT8 => (*v as f64).to_sql(ty, out),
                Type::FLOAT4 => (*v as f32).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => v.to_string().to_sql(ty, out),
                _ => Err(bad()),
            },
            Val::Real(v) => match *ty {
                Type::FLOAT8 => v.to_sql(ty, out),
                Type::FLOAT4 => (*v as f32).to_sql(ty, out),
                Type::INT8 if v.fract() == 0.0 && v.abs() < 9.0e18 => (*v as i64).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR => v.to_string().to_sql(ty, out),
                _ => Err(bad()),
            },
            Val::Text(v) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR | Type::UNKNOWN => {
                    v.as_str().to_sql(ty, out)
                }
                Type::INT8 => v.trim().parse::<i64>()?.to_sql(ty, out),
                Type::FLOAT8 => v.trim().parse::<f64>()?.to_sql(ty, out),
                _ => Err(bad()),
            },
            Val::Blob(v) => match *ty {
                Type::BYTEA => v.as_slice().to_sql(ty, out),
                _ => Err(bad()),
            },
        }
    }
    fn accepts(_: &postgres::types::Type) -> bool {
        true
    }
    postgres::types::to_sql_checked!();
}

fn pg_row(r: &postgres::Row) -> Result<Row> {
    use postgres::types::Type;
    let mut out = Vec::with_capacity(r.len());
    for (i, c) in r.columns().iter().enumerate() {
        let ty = c.type_();
        let v = match *ty {
            Type::INT8 => r.try_get::<_, Option<i64>>(i)?.map(Val::Int),
            Type::INT4 => r.try_get::<_, Option<i32>>(i)?.map(|v| Val::Int(v.into())),
            Type::INT2 => r.try_get::<_, Option<i16>>(i)?.map(|v| Val::Int(v.into())),
            Type::BOOL => r.try_get::<_, Option<bool>>(i)?.map(|v| Val::Int(v.into())),
            Type::FLOAT8 => r.try_get::<_, Option<f64>>(i)?.map(Val::Real),
            Type::FLOAT4 => r.try_get::<_, Option<f32>>(i)?.map(|v| Val::Real(v.into())),
            Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => {
                r.try_get::<_, Option<String>>(i)?.map(Val::Text)
            }
            Type::BYTEA => r.try_get::<_, Option<Vec<u8>>>(i)?.map(Val::Blob),
            _ => bail!(
                "column {} has type {ty}, which hugetune does not read",
                c.name()
            ),
        };
        out.push(v.unwrap_or(Val::Null));
    }
    Ok(Row(out))
}

fn sqlite_row(r: &rusqlite::Row, n: usize) -> rusqlite::Result<Row> {
    use rusqlite::types::ValueRef;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        out.push(match r.get_ref(i)? {
            ValueRef::Null => Val::Null,
            ValueRef::Integer(v) => Val::Int(v),
            ValueRef::Real(v) => Val::Real(v),
            ValueRef::Text(t) => Val::Text(String::from_utf8_lossy(t).into_owned()),
            ValueRef::Blob(b) => Val::Blob(b.to_vec()),
        });
    }
    Ok(Row(out))
}

/// SQLSTATEs after which a PostgreSQL transaction is simply run again:
/// serialization failure and deadlock (the server rolled it back whole).
fn retryable(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<postgres::Error>()
            .and_then(|p| p.code())
            .is_some_and(|s| {
                *s == postgres::error::SqlState::T_R_SERIALIZATION_FAILURE
                    || *s == postgres::error::SqlState::T_R_DEADLOCK_DETECTED
            })
    })
}

impl Conn {
    pub fn sqlite(c: rusqlite::Connection) -> Conn {
        Conn::Sqlite(c)
    }

    pub fn postgres(client: postgres::Client) -> Conn {
        Conn::Pg(Box::new(Pg {
            client,
            statements: HashMap::new(),
            open: false,
        }))
    }

    pub fn engine(&self) -> Engine {
        match self {
            Conn::Sqlite(_) => Engine::Sqlite,
            Conn::Pg(_) => Engine::Postgres,
        }
    }

    /// The SQLite connection (its PRAGMAs); None on PostgreSQL.
    pub fn as_sqlite(&self) -> Option<&rusqlite::Connection> {
        match self {
            Conn::Sqlite(c) => Some(c),
            Conn::Pg(_) => None,
        }
    }

    fn pg_statement(pg: &mut Pg, sql: &str) -> Result<postgres::Statement> {
        if let Some(s) = pg.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = pg
            .client
            .prepare(&pg_sql(sql))
            .with_context(|| format!("preparing {}", first_words(sql)))?;
        pg.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    /// Runs one statement; the rows it changed.
    pub fn exec(&mut self, sql: &str, params: &[Val]) -> Result<u64> {
        match self {
            Conn::Sqlite(c) => {
                let mut st = c.prepare_cached(sql)?;
                Ok(st.execute(rusqlite::params_from_iter(params.iter()))? as u64)
            }
            Conn::Pg(pg) => {
                let st = Conn::pg_statement(pg, sql)?;
                let p: Vec<&(dyn postgres::types::ToSql + Sync)> = params
                    .iter()
                    .map(|v| v as &(dyn postgres::types::ToSql + Sync))
                    .collect();
                Ok(pg.client.execute(&st, &p)?)
            }
        }
    }

    /// Every row a query returns.
    pub fn query(&mut self, sql: &str, params: &[Val]) -> Result<Vec<Row>> {
        match self {
            Conn::Sqlite(c) => {
                let mut st = c.prepare_cached(sql)?;
                let n = st.column_count();
                let rows = st
                    .query_map(rusqlite::params_from_iter(params.iter()), |r| {
                        sqlite_row(r, n)
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(rows)
            }
            Conn::Pg(pg) => {
                let st = Conn::pg_statement(pg, sql)?;
                let p: Vec<&(dyn postgres::types::ToSql + Sync)> = params
                    .iter()
                    .map(|v| v as &(dyn postgres::types::ToSql + Sync))
                    .collect();
                pg.client.query(&st, &p)?.iter().map(pg_row).collect()
            }
        }
    }

    /// The first row, if any.
    pub fn query_opt(&mut self, sql: &str, params: &[Val]) -> Result<Option<Row>> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// The first row; a query that returns none is an error naming `what`.
    pub fn query_one(&mut self, sql: &str, params: &[Val], what: &str) -> Result<Row> {
        self.query_opt(sql, params)?
            .with_context(|| format!("{what}: the database returned no row"))
    }

    /// PostgreSQL only: the first column of a statement without parameters, as
    /// text, in one round trip (no prepare); Ok(None) when the statement names a
    /// table that does not exist.
    pub fn pg_simple_first(&mut self, sql: &str) -> Result<Option<Vec<Option<String>>>> {
        let Conn::Pg(pg) = self else {
            bail!("not a PostgreSQL connection");
        };
        match pg.client.simple_query(sql) {
            Ok(msgs) => Ok(Some(
                msgs.iter()
                    .filter_map(|m| match m {
                        postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).map(str::to_string)),
                        _ => None,
                    })
                    .collect(),
            )),
            Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Statements without parameters, separated by `;` (migrations).
    pub fn batch(&mut self, sql: &str) -> Result<()> {
        match self {
            Conn::Sqlite(c) => c.execute_batch(sql)?,
            Conn::Pg(pg) => pg.client.batch_execute(sql)?,
        }
        Ok(())
    }

    fn begin(&mut self) -> Result<()> {
        match self {
            Conn::Sqlite(c) => {
                // A transaction a panic left open is rolled back first.
                if !c.is_autocommit() {
                    c.execute_batch("ROLLBACK")?;
                }
                c.execute_batch("BEGIN IMMEDIATE")?;
            }
            Conn::Pg(pg) => {
                if pg.client.is_closed() {
                    bail!("the connection to the PostgreSQL server was lost");
                }
                // Not "ROLLBACK; BEGIN" every time: outside a transaction it
                // makes the server log a warning per transaction.
                pg.client
                    .batch_execute(if pg.open { "ROLLBACK; BEGIN" } else { "BEGIN" })?;
                pg.open = true;
            }
        }
        Ok(())
    }

    /// Runs `f` (reads only) on one snapshot of the database: rows other
    /// connections commit meanwhile are not seen halfway (an export whose
    /// tables were read at different moments could name rows it lacks).
    pub fn snapshot<T>(&mut self, f: impl FnOnce(&mut Conn) -> Result<T>) -> Result<T> {
        match self {
            Conn::Sqlite(c) => {
                if !c.is_autocommit() {
                    c.execute_batch("ROLLBACK")?;
                }
                // WAL: a deferred transaction reads one snapshot, taken at its
                // first read, and blocks no writer.
                c.execute_batch("BEGIN DEFERRED")?;
            }
            Conn::Pg(pg) => {
                pg.client.batch_execute(if pg.open {
                    "ROLLBACK; BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
                } else {
                    "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
                })?;
                pg.open = true;
            }
        }
        let r = f(self);
        let end = self.end(r.is_ok());
        let v = r?;
        end?;
        Ok(v)
    }

    /// Commits (or rolls back) the transaction `begin` or `snapshot` opened.
    fn end(&mut self, commit: bool) -> Result<()> {
        let r = self.batch(if commit { "COMMIT" } else { "ROLLBACK" });
        if let Conn::Pg(pg) = self {
            pg.open = false;
        }
        r
    }

    /// Runs `f` in one transaction: all of its writes or none. On PostgreSQL a
    /// deadlock or serialization failure runs it again (up to 8 times).
    pub fn transaction<T>(&mut self, mut f: impl FnMut(&mut Conn) -> Result<T>) -> Result<T> {
        let mut attempt = 0;
        loop {
            self.begin()?;
            let r = f(self).and_then(|v| {
                self.end(true)?;
                Ok(v)
            });
            match r {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let _ = self.end(false);
                    attempt += 1;
                    if self.engine() == Engine::Postgres && attempt < 8 && retryable(&e) {
                        std::thread::sleep(std::time::Duration::from_millis(5 << attempt.min(5)));
                        continue;
                    }
                    return Err(e);
                }
            }
        }
    }
}

/// The start of a statement, for messages.
fn first_words(sql: &str) -> String {
    let mut s = String::new();
    for w in sql.split_whitespace().take(6) {
        let _ = write!(s, "{w} ");
    }
    s.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_outside_quotes() {
        assert_eq!(
            pg_sql("SELECT a FROM t WHERE b = ?1 AND c = '?2' AND \"d?3\" = ?12"),
            "SELECT a FROM t WHERE b = $1 AND c = '?2' AND \"d?3\" = $12"
        );
        assert_eq!(pg_sql("SELECT '?' || ?1"), "SELECT '?' || $1");
    }

    #[test]
    fn rows_name_the_column_on_a_mismatch() {
        let r = Row(vec![Val::Int(1), Val::Text("x".into()), Val::Null]);
        assert_eq!(r.int(0).unwrap(), 1);
        assert_eq!(r.real(0).unwrap(), 1.0);
        assert!(r.bool(0).unwrap());
        assert_eq!(r.opt_int(2).unwrap(), None);
        let e = r.int(1).unwrap_err().to_string();
        assert!(e.contains("column 1") && e.contains("text"), "{e}");
        assert!(r.text(7).is_err());
    }
}
