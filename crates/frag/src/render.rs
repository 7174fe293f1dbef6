//! Terminal, JSON and HTML views of a snapshot.
