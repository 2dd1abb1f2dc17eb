//! Names that a provider must keep apart although a careless one would not: pairs with equal
//! 32-bit hashes under the hashes lock libraries key names by, and pairs that are the same text
//! under Unicode normalisation. C27 uses them; a provider's own tests can too.
//!
//! The hashes are implemented here from their published definitions and checked against their
//! published test vectors (and, for PostgreSQL's `hashtext`, against values a PostgreSQL 15
//! server returned), so the kit can search colliding names for any prefix it is given.

use std::collections::HashMap;

/// A 32-bit hash that some lock implementation keys names by (advisory locks take an integer
/// key, so a name is hashed to one), under which two different names can share one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Hash32 {
    /// CRC-32 (IEEE 802.3, as zlib's `crc32`).
    Crc32,
    /// FNV-1a, 32 bits.
    Fnv1a,
    /// Java's `String.hashCode` (over UTF-16 code units), as ShedLock-style code keys advisory
    /// locks by `name.hashCode()`.
    JavaHashCode,
    /// PostgreSQL's `hashtext` (Jenkins' lookup3 `hash_bytes` on a little-endian server), as
    /// `pg_advisory_lock(hashtext(name))` keys a lock.
    PgHashtext,
    /// MurmurHash3, x86 32-bit variant, seed 0.
    Murmur3,
}

impl Hash32 {
    /// Every hash, in a fixed order.
    pub const ALL: [Hash32; 5] =
        [Hash32::Crc32, Hash32::Fnv1a, Hash32::JavaHashCode, Hash32::PgHashtext, Hash32::Murmur3];

    /// A short label for reports.
    pub fn label(self) -> &'static str {
        match self {
            Hash32::Crc32 => "CRC-32",
            Hash32::Fnv1a => "FNV-1a",
            Hash32::JavaHashCode => "String.hashCode",
            Hash32::PgHashtext => "hashtext",
            Hash32::Murmur3 => "MurmurHash3",
        }
    }

    /// The hash of `s`.
    pub fn of(self, s: &str) -> u32 {
        let b = s.as_bytes();
        match self {
            Hash32::Crc32 => crc32(b),
            Hash32::Fnv1a => fnv1a(b),
            Hash32::JavaHashCode => {
                s.encode_utf16().fold(0u32, |h, c| h.wrapping_mul(31).wrapping_add(u32::from(c)))
            }
            Hash32::PgHashtext => pg_hash_bytes(b),
            Hash32::Murmur3 => murmur3_32(b),
        }
    }
}

/// Two different names, both `prefix` followed by a six-character suffix of ASCII letters,
/// digits, `-` and `_`, with equal `hash`. The search is deterministic for a given prefix: it
/// tries suffixes in a fixed, scrambled order (every position varies, so that a hash linear
/// over the bytes, such as CRC-32, also meets colliding differences) and remembers each hash
/// seen (a birthday search: about 80 000 names, a few MB, for a 32-bit hash). `None` only if
/// `limit` names gave no pair (the chance of that past 500 000 names is below 10⁻¹²).
pub fn colliding_pair(hash: Hash32, prefix: &str, limit: u32) -> Option<(String, String)> {
    let mut seen: HashMap<u32, u32> = HashMap::new();
    let name = |i: u32| format!("{prefix}{}", suffix(i));
    for i in 0..limit {
        let n = name(i);
        if let Some(j) = seen.insert(hash.of(&n), i) {
            let other = name(j);
            // Two indices may scramble to one suffix: that is no collision.
            if other != n {
                return Some((other, n));
            }
        }
    }
    None
}

/// The `i`-th suffix: six characters of `[0-9A-Za-z_-]`, from the top 36 bits of `i` times an
/// odd 64-bit constant.
fn suffix(i: u32) -> String {
    const DIGITS: &[u8; 64] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz-_";
    let mut x = u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 28;
    let mut out = [b'0'; 6];
    for slot in &mut out {
        *slot = DIGITS[(x % 64) as usize];
        x /= 64;
    }
    out.iter().map(|&c| char::from(c)).collect()
}

/// Pairs of different strings that are one text under Unicode normalisation (canonical
/// equivalence, NFC = NFD, or compatibility, NFKC) or under case folding — a provider that
/// normalises or folds names makes each pair one lock. Each entry: (what makes them equal,
/// one spelling, the other).
pub const EQUIVALENT_SPELLINGS: &[(&str, &str, &str)] = &[
    ("NFC/NFD: precomposed é vs e + combining acute", "caf\u{e9}", "cafe\u{301}"),
    ("NFC/NFD: Hangul syllable vs its jamo", "\u{d55c}", "\u{1112}\u{1161}\u{11ab}"),
    ("canonical singleton: ANGSTROM SIGN vs Å", "\u{212b}", "\u{c5}"),
    ("canonical singleton: KELVIN SIGN vs K", "\u{212a}", "K"),
    ("NFKC: ligature ﬁ vs fi", "\u{fb01}", "fi"),
    ("NFKC: fullwidth Ａ vs A", "\u{ff21}", "A"),
    ("NFKC: circled ① vs 1", "\u{2460}", "1"),
    ("NFKC: superscript ² vs 2", "x\u{b2}", "x2"),
    ("case folding: ß vs ss", "stra\u{df}e", "strasse"),
    ("case folding: dotless ı vs i", "\u{131}", "i"),
];

/// The escape markers of common key schemes: percent-encoding (`%`), hex after `_`, `=`
/// (quoted-printable), `~`, `\\`, `-`, `.`, `+`, `!`, `$`, `:`, `@`. [`escape_merges`] builds
/// its pairs for each, so a provider's own marker is among them.
pub const ESCAPE_MARKERS: &[char] = &['%', '_', '=', '~', '\\', '-', '.', '+', '!', '$', ':', '@'];

/// Pairs of distinct names that an escaping scheme which is not injective merges into one key,
/// as `(why, a, b)`. C27 locks each pair at once on two instances and releases one while the
/// other is held: both must stay two locks. A key scheme must survive all of them:
///
/// - for each marker `m` of [`ESCAPE_MARKERS`]:
///   - `/` escaped as `m2F`, against that text written raw: `a/b` and `am2Fb`;
///   - hex digits in upper and lower case: `am2Fb` and `am2fb`;
///   - the marker doubled and not: `amb` and `ammb`;
///   - a character's hex against the character: `x` and `m78`;
///   - the escaped marker against the marker: `am` and `am25` (`m` as `%` hex);
///   - a trailing marker: `am` and `a`;
/// - hex without a marker against the raw text: `x` and `78`;
/// - characters a scheme replaces by one delimiter: `a/b`, `a:b`, `a b`, `a.b`, `a-b` against
///   `a_b`, and `a/b` against `a-b`, `a.b` and `a:b`;
/// - a name against its delimiter-joined halves: `ab` and `a/b`, `a_b` and `a__b`;
/// - upper and lower case: `Lock` and `lock`.
pub fn escape_merges() -> Vec<(String, String, String)> {
    let mut pairs = Vec::new();
    for &m in ESCAPE_MARKERS {
        let mut add = |why: &str, a: String, b: String| {
            pairs.push((format!("marker {m:?}: {why}"), a, b));
        };
        add("'/' escaped, against the escape written raw", "a/b".into(), format!("a{m}2Fb"));
        add("hex digits in upper and lower case", format!("a{m}2Fb"), format!("a{m}2fb"));
        add("the marker doubled and not", format!("a{m}b"), format!("a{m}{m}b"));
        add("a character's hex against the character", "x".into(), format!("{m}78"));
        add("the marker's own escape against the marker", format!("a{m}"), format!("a{m}25"));
        add("a trailing marker", format!("a{m}"), "a".into());
    }
    let plain: &[(&str, &str, &str)] = &[
        ("hex without a marker against the raw text", "x", "78"),
        ("'/' and '_' replaced by one delimiter", "a/b", "a_b"),
        ("':' and '_' replaced by one delimiter", "a:b", "a_b"),
        ("' ' and '_' replaced by one delimiter", "a b", "a_b"),
        ("'.' and '_' replaced by one delimiter", "a.b", "a_b"),
        ("'-' and '_' replaced by one delimiter", "a-b", "a_b"),
        ("'/' and '-' replaced by one delimiter", "a/b", "a-b"),
        ("'/' and '.' replaced by one delimiter", "a/b", "a.b"),
        ("'/' and ':' replaced by one delimiter", "a/b", "a:b"),
        ("a name against its delimiter-joined halves", "ab", "a/b"),
        ("a delimiter doubled and not", "a_b", "a__b"),
        ("upper and lower case", "Lock", "lock"),
    ];
    for (why, a, b) in plain {
        pairs.push(((*why).to_owned(), (*a).to_owned(), (*b).to_owned()));
    }
    pairs
}

/// CRC-32 (IEEE, reflected, polynomial 0xEDB88320), bitwise.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

fn fnv1a(data: &[u8]) -> u32 {
    data.iter().fold(0x811c_9dc5u32, |h, &b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193))
}

fn le32(b: &[u8]) -> u32 {
    b.iter().enumerate().fold(0u32, |acc, (i, &x)| acc | (u32::from(x) << (8 * i)))
}

fn murmur3_32(data: &[u8]) -> u32 {
    const C1: u32 = 0xcc9e_2d51;
    const C2: u32 = 0x1b87_3593;
    let mut h = 0u32;
    let mut blocks = data.chunks_exact(4);
    for block in &mut blocks {
        let k = le32(block).wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
        h = (h ^ k).rotate_left(13).wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        h ^= le32(tail).wrapping_mul(C1).rotate_left(15).wrapping_mul(C2);
    }
    // Lengths past u32::MAX wrap as the reference implementation's int does.
    h ^= data.len() as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// PostgreSQL's `hash_bytes` (src/common/hashfn.c), which `hashtext` applies to a text's bytes
/// under a deterministic collation; the little-endian byte order of x86 and ARM servers.
fn pg_hash_bytes(data: &[u8]) -> u32 {
    fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
        *a = a.wrapping_sub(*c) ^ c.rotate_left(4);
        *c = c.wrapping_add(*b);
        *b = b.wrapping_sub(*a) ^ a.rotate_left(6);
        *a = a.wrapping_add(*c);
        *c = c.wrapping_sub(*b) ^ b.rotate_left(8);
        *b = b.wrapping_add(*a);
        *a = a.wrapping_sub(*c) ^ c.rotate_left(16);
        *c = c.wrapping_add(*b);
        *b = b.wrapping_sub(*a) ^ a.rotate_left(19);
        *a = a.wrapping_add(*c);
        *c = c.wrapping_sub(*b) ^ b.rotate_left(4);
        *b = b.wrapping_add(*a);
    }
    fn finish(a: &mut u32, b: &mut u32, c: &mut u32) {
        *c = (*c ^ *b).wrapping_sub(b.rotate_left(14));
        *a = (*a ^ *c).wrapping_sub(c.rotate_left(11));
        *b = (*b ^ *a).wrapping_sub(a.rotate_left(25));
        *c = (*c ^ *b).wrapping_sub(b.rotate_left(16));
        *a = (*a ^ *c).wrapping_sub(c.rotate_left(4));
        *b = (*b ^ *a).wrapping_sub(a.rotate_left(14));
        *c = (*c ^ *b).wrapping_sub(b.rotate_left(24));
    }
    // keylen is a C int in PostgreSQL: a name is never near 2³¹ bytes.
    let init = 0x9e37_79b9u32.wrapping_add(data.len() as u32).wrapping_add(3_923_095);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut blocks = data.chunks_exact(12);
    for k in &mut blocks {
        a = a.wrapping_add(le32(&k[0..4]));
        b = b.wrapping_add(le32(&k[4..8]));
        c = c.wrapping_add(le32(&k[8..12]));
        mix(&mut a, &mut b, &mut c);
    }
    let k = blocks.remainder();
    // The last 11 bytes: a takes bytes 0-3, b 4-7, c 8-10 shifted up one byte (its lowest
    // byte is left for the length, as in the original).
    a = a.wrapping_add(le32(&k[..k.len().min(4)]));
    if k.len() > 4 {
        b = b.wrapping_add(le32(&k[4..k.len().min(8)]));
    }
    if k.len() > 8 {
        c = c.wrapping_add(le32(&k[8..]) << 8);
    }
    finish(&mut a, &mut b, &mut c);
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_hash_matches_its_published_test_vectors() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926, "CRC-32 check value");
        assert_eq!(fnv1a(b""), 0x811c_9dc5);
        assert_eq!(fnv1a(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a(b"foobar"), 0xbf9c_f968);
        assert_eq!(murmur3_32(b""), 0);
        assert_eq!(murmur3_32(b"hello"), 0x248b_fa47);
        assert_eq!(murmur3_32(b"The quick brown fox jumps over the lazy dog"), 0x2e4f_f723);
        assert_eq!(Hash32::JavaHashCode.of("hello"), 99_162_322);
        assert_eq!(Hash32::JavaHashCode.of("Aa"), Hash32::JavaHashCode.of("BB"));
    }

    #[test]
    fn hashtext_matches_what_a_postgresql_server_returned() {
        // The strings cover whole 12-byte blocks and every tail length from 0 to 11, and
        // multi-byte UTF-8.
        for (s, want) in PG_HASHTEXT {
            assert_eq!(pg_hash_bytes(s.as_bytes()) as i32, *want, "hashtext({s:?})");
        }
    }

    /// `SELECT s, hashtext(s)` on PostgreSQL 15.18 (Debian 12, x86-64), run 2026-12-04.
    const PG_HASHTEXT: &[(&str, i32)] = &[
        ("", -1_477_818_771),
        ("a", 1_075_015_857),
        ("ab", 1_718_550_461),
        ("abc", -785_388_649),
        ("abcd", -393_934_804),
        ("abcde", -445_659_580),
        ("abcdef", -1_747_460_160),
        ("abcdefg", 501_636_814),
        ("abcdefgh", -1_960_928_205),
        ("abcdefghi", -92_131_489),
        ("abcdefghij", 1_948_051_852),
        ("abcdefghijk", -1_483_803_693),
        ("abcdefghijkl", -1_586_087_212),
        ("abcdefghijklm", 405_849_808),
        ("shedlock-run-1-c27-h-00000", -1_896_429_247),
        ("z\u{fc}rich-\u{4efb}\u{52a1}-\u{1f512}", 2_060_816_079),
        ("a much longer lock name that spans several twelve-byte blocks", 1_778_685_128),
    ];

    #[test]
    fn colliding_pairs_are_different_names_with_equal_hashes() {
        for hash in Hash32::ALL {
            let (a, b) = colliding_pair(hash, "run-1-c27-", 2_000_000).unwrap();
            assert_ne!(a, b);
            assert!(a.starts_with("run-1-c27-") && b.starts_with("run-1-c27-"));
            assert_eq!(hash.of(&a), hash.of(&b), "{hash:?}: {a} / {b}");
        }
    }

    #[test]
    fn equivalent_spellings_differ_byte_for_byte() {
        for (why, a, b) in EQUIVALENT_SPELLINGS {
            assert_ne!(a, b, "{why}");
        }
    }

    #[test]
    fn escape_merges_are_pairs_of_distinct_names_for_every_marker() {
        let pairs = escape_merges();
        for (why, a, b) in &pairs {
            assert_ne!(a, b, "{why}");
        }
        for m in ESCAPE_MARKERS {
            assert!(pairs.iter().any(|(why, ..)| why.starts_with(&format!("marker {m:?}"))));
        }
        // Percent-encoding's merges, as a provider that escapes '/' but not '%' makes them.
        assert!(pairs.iter().any(|(_, a, b)| a == "a/b" && b == "a%2Fb"));
        assert!(pairs.iter().any(|(_, a, b)| a == "a%2Fb" && b == "a%2fb"));
    }
}
