//! The observer's JSON writer: objects, arrays, strings (escaped per RFC 8259), integers and
//! null, appended to a `String`. Just what the endpoints need; nothing is parsed.
//!
//! Commas are the writer's business: [`Obj`] and [`Arr`] put one before every member but the
//! first, so a caller only names keys and values; dropping one (or `end`) writes its closing
//! bracket, so a chain of members ending a statement closes the object by itself.

use std::fmt::Write;

/// Appends `s` as a JSON string: quoted, with `"`, `\` and the control characters escaped
/// (the common ones by name, the others as `\u00XX`). Everything else is copied as UTF-8.
pub(crate) fn string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// An object being written: `{` on creation, `}` on [`end`](Obj::end).
pub(crate) struct Obj<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Obj<'a> {
    pub(crate) fn new(out: &'a mut String) -> Obj<'a> {
        out.push('{');
        Obj { out, first: true }
    }

    /// Writes the key (and the comma before it) and returns the output for its value.
    pub(crate) fn key(&mut self, k: &str) -> &mut String {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        string(self.out, k);
        self.out.push(':');
        self.out
    }

    pub(crate) fn str(&mut self, k: &str, v: &str) -> &mut Self {
        string(self.key(k), v);
        self
    }

    pub(crate) fn opt_str(&mut self, k: &str, v: Option<&str>) -> &mut Self {
        match v {
            Some(v) => string(self.key(k), v),
            None => self.key(k).push_str("null"),
        }
        self
    }

    /// A value written with `Display` (a pid, a source location) as a string.
    pub(crate) fn display(&mut self, k: &str, v: impl std::fmt::Display) -> &mut Self {
        string(self.key(k), &v.to_string());
        self
    }

    pub(crate) fn opt_display(&mut self, k: &str, v: Option<impl std::fmt::Display>) -> &mut Self {
        match v {
            Some(v) => self.display(k, v),
            None => {
                self.key(k).push_str("null");
                self
            }
        }
    }

    pub(crate) fn num(&mut self, k: &str, v: u64) -> &mut Self {
        let _ = write!(self.key(k), "{v}");
        self
    }

    pub(crate) fn opt_num(&mut self, k: &str, v: Option<u64>) -> &mut Self {
        match v {
            Some(v) => self.num(k, v),
            None => {
                self.key(k).push_str("null");
                self
            }
        }
    }

    pub(crate) fn bool(&mut self, k: &str, v: bool) -> &mut Self {
        self.key(k).push_str(if v { "true" } else { "false" });
        self
    }

    /// A string array member.
    pub(crate) fn strs<S: AsRef<str>>(&mut self, k: &str, items: impl IntoIterator<Item = S>) -> &mut Self {
        let mut a = Arr::new(self.key(k));
        for s in items {
            string(a.item(), s.as_ref());
        }
        a.end();
        self
    }

    /// Closes the object (as dropping it does).
    pub(crate) fn end(self) {}
}

impl Drop for Obj<'_> {
    fn drop(&mut self) {
        self.out.push('}');
    }
}

/// An array being written: `[` on creation, `]` on [`end`](Arr::end).
pub(crate) struct Arr<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Arr<'a> {
    pub(crate) fn new(out: &'a mut String) -> Arr<'a> {
        out.push('[');
        Arr { out, first: true }
    }

    /// Writes the comma before the next element and returns the output for it.
    pub(crate) fn item(&mut self) -> &mut String {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out
    }

    /// Closes the array (as dropping it does).
    pub(crate) fn end(self) {}
}

impl Drop for Arr<'_> {
    fn drop(&mut self) {
        self.out.push(']');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_per_rfc_8259() {
        let mut s = String::new();
        string(&mut s, "a\"b\\c\nd\u{1}e\u{7f}é<0.1.2>");
        assert_eq!(s, r#""a\"b\\c\nd\u0001e\u007fé<0.1.2>""#);
    }

    #[test]
    fn objects_and_arrays_put_commas_between_members_only() {
        let mut s = String::new();
        let mut o = Obj::new(&mut s);
        o.str("a", "x").num("b", 7).opt_num("c", None).bool("d", true).strs("e", ["p", "q"]).strs("f", [""; 0]);
        {
            let mut a = Arr::new(o.key("g"));
            Obj::new(a.item()).end();
            a.item().push_str("null");
            a.end();
        }
        o.end();
        assert_eq!(s, r#"{"a":"x","b":7,"c":null,"d":true,"e":["p","q"],"f":[],"g":[{},null]}"#);
    }
}
