//! Compact reference streams: every data reference of a run, in program order.
//!
//! Encoding: per reference, the zigzag varint of the address delta to the previous
//! reference, shifted left by one with the write flag in bit 0; the whole stream is
//! zstd-compressed. Sequential code compresses to a few bits per reference, so the
//! full stream (markers included) is kept and nothing is dropped at capture time.

use std::io::{BufReader, BufWriter, Read, Write};

pub struct RefWriter<W: Write> {
    enc: zstd::stream::Encoder<'static, BufWriter<W>>,
    prev: u64,
    count: u64,
    buf: Vec<u8>,
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

impl<W: Write> RefWriter<W> {
    pub fn new(w: W) -> std::io::Result<Self> {
        Ok(RefWriter {
            enc: zstd::stream::Encoder::new(BufWriter::new(w), 3)?,
            prev: 0,
            count: 0,
            buf: Vec::with_capacity(1 << 16),
        })
    }

    pub fn push(&mut self, addr: u64, write: bool) -> std::io::Result<()> {
        let delta = addr.wrapping_sub(self.prev) as i64;
        self.prev = addr;
        let mut v = (zigzag(delta) as u128) << 1 | write as u128;
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.buf.push(byte);
                break;
            }
            self.buf.push(byte | 0x80);
        }
        self.count += 1;
        if self.buf.len() >= 1 << 16 {
            self.enc.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn finish(mut self) -> std::io::Result<W> {
        self.enc.write_all(&self.buf)?;
        let bw = self.enc.finish()?;
        bw.into_inner().map_err(|e| e.into_error())
    }
}

/// Iterates `(address, is_write)` over an encoded stream.
pub struct RefReader<R: Read> {
    dec: BufReader<zstd::stream::Decoder<'static, BufReader<R>>>,
    prev: u64,
}

impl<R: Read> RefReader<R> {
    pub fn new(r: R) -> std::io::Result<Self> {
        Ok(RefReader {
            dec: BufReader::with_capacity(1 << 16, zstd::stream::Decoder::new(r)?),
            prev: 0,
        })
    }

    fn byte(&mut self) -> std::io::Result<Option<u8>> {
        let mut b = [0u8; 1];
        match self.dec.read(&mut b)? {
            0 => Ok(None),
            _ => Ok(Some(b[0])),
        }
    }

    /// The next reference, `None` at a clean end; an error for a corrupt stream.
    pub fn next_ref(&mut self) -> std::io::Result<Option<(u64, bool)>> {
        let mut v: u128 = 0;
        let mut shift = 0;
        loop {
            let Some(b) = self.byte()? else {
                if shift == 0 {
                    return Ok(None);
                }
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "reference stream ends inside a value",
                ));
            };
            if shift > 70 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "reference stream: varint too long",
                ));
            }
            v |= ((b & 0x7f) as u128) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
        let write = v & 1 == 1;
        let delta = unzigzag((v >> 1) as u64);
        self.prev = self.prev.wrapping_add(delta as u64);
        Ok(Some((self.prev, write)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(refs in proptest::collection::vec((any::<u64>(), any::<bool>()), 0..2000)) {
            let mut w = RefWriter::new(Vec::new()).unwrap();
            for &(a, wr) in &refs {
                w.push(a, wr).unwrap();
            }
            prop_assert_eq!(w.count(), refs.len() as u64);
            let bytes = w.finish().unwrap();
            let mut r = RefReader::new(&bytes[..]).unwrap();
            let mut back = Vec::new();
            while let Some(x) = r.next_ref().unwrap() {
                back.push(x);
            }
            prop_assert_eq!(back, refs);
        }
    }

    #[test]
    fn sequential_streams_are_small() {
        let mut w = RefWriter::new(Vec::new()).unwrap();
        for i in 0..1_000_000u64 {
            w.push(0x7f00_0000_0000 + i * 8, i % 2 == 0).unwrap();
        }
        let bytes = w.finish().unwrap();
        assert!(bytes.len() < 20_000, "{} bytes", bytes.len());
    }

    #[test]
    fn truncated_stream_is_an_error_not_a_panic() {
        let mut w = RefWriter::new(Vec::new()).unwrap();
        for i in 0..10_000u64 {
            w.push(i.wrapping_mul(0x9e3779b97f4a7c15), false).unwrap();
        }
        let bytes = w.finish().unwrap();
        let mut r = RefReader::new(&bytes[..bytes.len() / 2]).unwrap();
        let res: std::io::Result<()> = (|| {
            while r.next_ref()?.is_some() {}
            Ok(())
        })();
        assert!(res.is_err());
    }
}
