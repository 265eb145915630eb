//! A streaming XES reader (`.xes` and gzip-compressed `.xes.gz`).
//!
//! It reads what discovery and import need and nothing more: each trace's `concept:name`
//! (the case id) and each event's `concept:name` (the activity) and `time:timestamp`.
//! Nested attributes, lists, extensions and globals are skipped.
//!
//! Cases are made the way PM4Py makes them from its data frame, so that counts and
//! variants agree: traces sharing a case id are merged, and traces without events are not
//! cases. Neither happens silently: each merge, each empty trace and each timestamp that
//! does not parse (its event then sorts last) is an [`XesRemark`] in [`XesLog::remarks`]. Events stay in file order in [`XesLog`]; [`XesLog::to_event_log`] orders each
//! case stably by timestamp (events without one last), as PM4Py's discovery does, while
//! [`XesLog::to_event_log_in_file_order`] keeps the file order, as PM4Py's
//! `get_variants` statistics do. The two differ only when a file lists events out of
//! time order (`interval_event_log.xes` has one such case: 10 variants against 9).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use flowmem_model::{Action, Meta, Step, ToolCall, Trajectory};
use quick_xml::events::{BytesStart, Event};
use rustc_hash::FxHashMap;

use crate::{EventLog, EventLogBuilder, MiningError};

/// An XES log: cases of events, with activity names interned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XesLog {
    /// Activity names in order of first appearance; [`XesEvent::activity`] indexes this.
    pub activities: Vec<String>,
    /// The cases, in order of first appearance of their id.
    pub cases: Vec<XesCase>,
    /// Events without a `concept:name`, which were skipped.
    pub skipped_events: u64,
    /// What the reader changed or left out, in file order: merged traces, empty traces,
    /// timestamps that do not parse.
    pub remarks: Vec<XesRemark>,
}

/// Something in an XES file that the reader handled in a way a user should know about.
///
/// Traces are numbered from 1 in file order, events from 1 within their trace.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum XesRemark {
    /// A trace whose case id an earlier trace has: its events were appended to that case.
    RepeatedCase {
        /// The case id.
        case: String,
        /// The repeating trace.
        trace: usize,
        /// The first trace with the id.
        first_trace: usize,
    },
    /// A trace without events, which is no case.
    EmptyTrace {
        /// Its case id, if it has one.
        case: Option<String>,
        /// The trace.
        trace: usize,
    },
    /// An event whose `time:timestamp` does not parse: it is ordered as an event without
    /// a timestamp (after the others of its case).
    BadTimestamp {
        /// The case id (`#<trace>` when the trace has none).
        case: String,
        /// The trace.
        trace: usize,
        /// The event within the trace.
        event: usize,
        /// The text found.
        value: String,
    },
}

impl std::fmt::Display for XesRemark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            XesRemark::RepeatedCase { case, trace, first_trace } => write!(
                f,
                "trace {trace} repeats case `{case}` of trace {first_trace}; its events were added to that case"
            ),
            XesRemark::EmptyTrace { case: Some(case), trace } => {
                write!(f, "trace {trace} (case `{case}`) has no events and was left out")
            }
            XesRemark::EmptyTrace { case: None, trace } => write!(f, "trace {trace} has no events and was left out"),
            XesRemark::BadTimestamp { case, trace, event, value } => write!(
                f,
                "event {event} of trace {trace} (case `{case}`) has the timestamp `{value}`, which is not an XES date; it is ordered after the events with a timestamp"
            ),
        }
    }
}

/// One case of an XES log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XesCase {
    /// The trace's `concept:name`; `#<n>` (the trace's position) when it has none.
    pub id: String,
    /// The events in file order.
    pub events: Vec<XesEvent>,
}

/// One event of an XES case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XesEvent {
    /// Index into [`XesLog::activities`].
    pub activity: u32,
    /// `time:timestamp` as nanoseconds since the Unix epoch (UTC), when present and valid.
    pub time: Option<i64>,
}

/// Reads an XES file, gzip-compressed or not (detected from the content).
///
/// # Errors
///
/// [`MiningError::Io`] when the file cannot be read or decompressed, [`MiningError::Xml`] when it is
/// not well-formed XML, and [`MiningError::NotXes`] when it has no `<log>` root.
///
/// # Example
///
/// ```no_run
/// let xes = flowmem_mining::read_xes("log.xes.gz".as_ref())?;
/// let log = xes.to_event_log();
/// println!("{} cases, {} variants", log.n_cases(), log.variants().len());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_xes(path: &Path) -> Result<XesLog, MiningError> {
    let io_error = |source| MiningError::Io { path: path.to_path_buf(), source };
    let file = File::open(path).map_err(io_error)?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let is_gzip = reader.fill_buf().map_err(io_error)?.starts_with(&[0x1f, 0x8b]);
    if !is_gzip {
        return parse_xes(reader, path);
    }
    let compressed_len = reader.get_ref().metadata().map_err(io_error)?.len();
    if compressed_len < PIPELINE_MIN_BYTES {
        let decoder = flate2::bufread::MultiGzDecoder::new(reader);
        return parse_xes(BufReader::with_capacity(1 << 16, decoder), path);
    }
    // Decompression and parsing cost about the same, so large files run them in two
    // threads joined by a bounded channel of chunks; the scope joins the decompressing
    // thread. Small files skip the thread, whose start-up would cost more than it saves.
    let (sender, receiver) = std::sync::mpsc::sync_channel::<std::io::Result<Vec<u8>>>(8);
    std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut decoder = flate2::bufread::MultiGzDecoder::new(reader);
            loop {
                let mut chunk = vec![0u8; CHUNK_SIZE];
                let mut filled = 0;
                while filled < CHUNK_SIZE {
                    match decoder.read(&mut chunk[filled..]) {
                        Ok(0) => break,
                        Ok(n) => filled += n,
                        Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(err) => {
                            let _ = sender.send(Err(err));
                            return;
                        }
                    }
                }
                chunk.truncate(filled);
                let done = filled < CHUNK_SIZE;
                // A closed channel means the parser stopped early (an XML error).
                if (filled > 0 && sender.send(Ok(chunk)).is_err()) || done {
                    return;
                }
            }
        });
        let chunks = ChunkReader { receiver, chunk: Vec::new(), pos: 0 };
        parse_xes(chunks, path)
    })
}

const CHUNK_SIZE: usize = 1 << 18;

/// Compressed files at least this large are decompressed in a second thread.
const PIPELINE_MIN_BYTES: u64 = 256 * 1024;

/// A `BufRead` over chunks received from the decompressing thread.
struct ChunkReader {
    receiver: std::sync::mpsc::Receiver<std::io::Result<Vec<u8>>>,
    chunk: Vec<u8>,
    pos: usize,
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(buf.len());
        buf[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for ChunkReader {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.pos >= self.chunk.len() {
            match self.receiver.recv() {
                Ok(Ok(chunk)) => {
                    self.chunk = chunk;
                    self.pos = 0;
                }
                Ok(Err(err)) => return Err(err),
                // The sender is gone: end of the stream.
                Err(_) => return Ok(&[]),
            }
        }
        Ok(&self.chunk[self.pos..])
    }

    fn consume(&mut self, amount: usize) {
        self.pos = (self.pos + amount).min(self.chunk.len());
    }
}

/// Parses an XES document from `reader`; `path` only names it in errors.
///
/// # Errors
///
/// As [`read_xes`].
pub fn parse_xes<R: BufRead>(reader: R, path: &Path) -> Result<XesLog, MiningError> {
    Parser::new(path).run(quick_xml::Reader::from_reader(reader))
}

impl XesLog {
    /// The log as variants of activity names, ready for discovery.
    #[must_use]
    ///
    /// Each case's events are stably ordered by timestamp, events without one last, as
    /// PM4Py orders them before discovery.
    pub fn to_event_log(&self) -> EventLog {
        self.build_event_log(true)
    }

    /// The log as variants, keeping each case's events in file order (as PM4Py's
    /// `get_variants` statistics count them).
    #[must_use]
    pub fn to_event_log_in_file_order(&self) -> EventLog {
        self.build_event_log(false)
    }

    fn build_event_log(&self, by_time: bool) -> EventLog {
        let mut builder = EventLogBuilder::new();
        let ids: Vec<u32> = self.activities.iter().map(|name| builder.intern(name)).collect();
        let mut events = Vec::new();
        let mut trace = Vec::new();
        for case in &self.cases {
            events.clear();
            events.extend_from_slice(&case.events);
            if by_time {
                sort_by_time(&mut events);
            }
            trace.clear();
            trace.extend(events.iter().map(|event| ids[event.activity as usize]));
            builder.push_ids(&trace, 1);
        }
        builder.build()
    }

    /// The name of `event`'s activity.
    #[must_use]
    pub fn activity(&self, event: &XesEvent) -> &str {
        &self.activities[event.activity as usize]
    }

    /// The number of events in all cases.
    #[must_use]
    pub fn n_events(&self) -> u64 {
        self.cases.iter().map(|case| case.events.len() as u64).sum()
    }

    /// One trajectory per case, each event a tool call named after its activity with no
    /// arguments. `source` goes into [`Meta::source`]. Timestamps only order the steps.
    #[must_use]
    pub fn to_trajectories(&self, source: &str) -> Vec<Trajectory> {
        self.cases
            .iter()
            .map(|case| {
                let mut events = case.events.clone();
                sort_by_time(&mut events);
                (case, events)
            })
            .map(|(case, events)| Trajectory {
                id: case.id.clone(),
                attempt: None,
                query: String::new(),
                steps: events
                    .iter()
                    .map(|event| Step {
                        observation: None,
                        reasoning: None,
                        action: Action::ToolCall(ToolCall::with_args(
                            self.activity(event),
                            flowmem_model::JsonObject::new(),
                        )),
                    })
                    .collect(),
                final_answer: None,
                reference: None,
                success: None,
                meta: Meta { site: None, domain: None, source: Some(source.to_owned()) },
            })
            .collect()
    }
}

impl XesEvent {
    /// The timestamp as RFC 3339 in UTC (`2010-12-30T13:32:00.000Z`), when present.
    #[must_use]
    pub fn timestamp_rfc3339(&self) -> Option<String> {
        self.time.map(format_rfc3339)
    }
}

/// Where the parser is in the document.
struct Parser<'p> {
    path: &'p Path,
    depth: u32,
    saw_log: bool,
    // Depth just inside the open `<trace>` / `<event>`, or 0.
    trace_level: u32,
    event_level: u32,
    case_id: Option<String>,
    events: Vec<XesEvent>,
    event_activity: Option<u32>,
    event_time: Option<i64>,
    // A timestamp of the open event that did not parse.
    event_bad_time: Option<String>,
    // Events seen in the open trace, and its timestamps that did not parse (event
    // number, text), reported when the trace closes and its case id is known.
    trace_events: usize,
    trace_bad_times: Vec<(usize, String)>,
    names: FxHashMap<Vec<u8>, u32>,
    log: XesLog,
    // Per case id, its index in `log.cases` and the trace that started it.
    case_index: FxHashMap<String, (usize, usize)>,
    n_traces: usize,
}

impl<'p> Parser<'p> {
    fn new(path: &'p Path) -> Parser<'p> {
        Parser {
            path,
            depth: 0,
            saw_log: false,
            trace_level: 0,
            event_level: 0,
            case_id: None,
            events: Vec::new(),
            event_activity: None,
            event_time: None,
            event_bad_time: None,
            trace_events: 0,
            trace_bad_times: Vec::new(),
            names: FxHashMap::default(),
            log: XesLog::default(),
            case_index: FxHashMap::default(),
            n_traces: 0,
        }
    }

    fn run<R: BufRead>(mut self, mut reader: quick_xml::Reader<R>) -> Result<XesLog, MiningError> {
        let mut buf = Vec::with_capacity(1024);
        loop {
            let event = match reader.read_event_into(&mut buf) {
                Ok(event) => event,
                Err(quick_xml::Error::Io(cause)) => {
                    // Reading or decompressing failed; the XML itself may be fine.
                    let source = std::io::Error::new(cause.kind(), cause.to_string());
                    return Err(MiningError::Io { path: self.path.to_path_buf(), source });
                }
                Err(source) => {
                    return Err(MiningError::Xml {
                        path: self.path.to_path_buf(),
                        position: reader.buffer_position(),
                        source,
                    });
                }
            };
            match event {
                Event::Start(start) => {
                    self.attribute_or_open(&start, true);
                    self.depth += 1;
                }
                // A self-closing `<trace/>` or `<event/>` opens and closes at once (an
                // empty trace, an event without a name); anything else is an attribute.
                Event::Empty(start) => match start.local_name().as_ref() {
                    b"trace" if self.trace_level == 0 => {
                        self.attribute_or_open(&start, true);
                        self.close_trace();
                    }
                    b"event" if self.trace_level != 0 && self.event_level == 0 => {
                        self.attribute_or_open(&start, true);
                        self.close_event();
                    }
                    _ => self.attribute_or_open(&start, false),
                },
                Event::End(end) => {
                    self.depth = self.depth.saturating_sub(1);
                    match end.local_name().as_ref() {
                        b"event" if self.event_level == self.depth + 1 => self.close_event(),
                        b"trace" if self.trace_level == self.depth + 1 => self.close_trace(),
                        _ => {}
                    }
                }
                Event::Eof => break,
                _ => {}
            }
            buf.clear();
        }
        if !self.saw_log {
            return Err(MiningError::NotXes { path: self.path.to_path_buf(), reason: "no `<log>` element".into() });
        }
        Ok(self.log)
    }

    fn attribute_or_open(&mut self, start: &BytesStart<'_>, is_open: bool) {
        let name = start.local_name();
        let name = name.as_ref();
        if is_open {
            match name {
                b"log" => self.saw_log = true,
                b"trace" if self.trace_level == 0 => {
                    self.trace_level = self.depth + 1;
                    self.case_id = None;
                    self.events.clear();
                    self.trace_events = 0;
                    self.trace_bad_times.clear();
                    return;
                }
                b"event" if self.trace_level != 0 && self.event_level == 0 => {
                    self.event_level = self.depth + 1;
                    self.event_activity = None;
                    self.event_time = None;
                    self.event_bad_time = None;
                    return;
                }
                _ => {}
            }
        }
        let in_event = self.event_level != 0 && self.depth == self.event_level;
        let in_trace = self.event_level == 0 && self.trace_level != 0 && self.depth == self.trace_level;
        if !in_event && !in_trace {
            return;
        }
        let mut key = None;
        let mut value = None;
        for attr in start.attributes().flatten() {
            match attr.key.as_ref() {
                b"key" => key = Some(attr.value),
                b"value" => value = Some(attr.value),
                _ => {}
            }
        }
        let (Some(key), Some(value)) = (key, value) else { return };
        match (key.as_ref(), in_event) {
            (b"concept:name", true) => {
                // Most events repeat a known name without escapes: look the raw bytes up
                // before allocating.
                if !value.contains(&b'&')
                    && let Some(&id) = self.names.get(value.as_ref())
                {
                    self.event_activity = Some(id);
                    return;
                }
                let name = unescape(&value);
                let id = match self.names.get(name.as_bytes()) {
                    Some(&id) => id,
                    None => {
                        let id = self.log.activities.len() as u32;
                        self.names.insert(name.as_bytes().to_vec(), id);
                        self.log.activities.push(name);
                        id
                    }
                };
                self.event_activity = Some(id);
            }
            (b"time:timestamp", true) if name == b"date" => {
                self.event_time = std::str::from_utf8(&value).ok().and_then(parse_timestamp);
                self.event_bad_time = self.event_time.is_none().then(|| unescape(&value));
            }
            (b"concept:name", false) => self.case_id = Some(unescape(&value)),
            _ => {}
        }
    }

    fn close_event(&mut self) {
        self.event_level = 0;
        self.trace_events += 1;
        match self.event_activity.take() {
            Some(activity) => {
                if let Some(value) = self.event_bad_time.take() {
                    self.trace_bad_times.push((self.trace_events, value));
                }
                self.events.push(XesEvent { activity, time: self.event_time.take() });
            }
            None => self.log.skipped_events += 1,
        }
    }

    fn close_trace(&mut self) {
        self.trace_level = 0;
        self.n_traces += 1;
        let trace = self.n_traces;
        let named = self.case_id.take();
        let id = named.clone().unwrap_or_else(|| format!("#{trace}"));
        for (event, value) in self.trace_bad_times.drain(..) {
            self.log.remarks.push(XesRemark::BadTimestamp { case: id.clone(), trace, event, value });
        }
        if self.events.is_empty() {
            self.log.remarks.push(XesRemark::EmptyTrace { case: named, trace });
            return;
        }
        let events = std::mem::take(&mut self.events);
        match self.case_index.get(&id) {
            Some(&(index, first_trace)) => {
                self.log.cases[index].events.extend(events);
                self.log.remarks.push(XesRemark::RepeatedCase { case: id, trace, first_trace });
            }
            None => {
                self.case_index.insert(id.clone(), (self.log.cases.len(), trace));
                self.log.cases.push(XesCase { id, events });
            }
        }
    }
}

/// Stable, like PM4Py's sort of its data frame by case and timestamp; events without a
/// timestamp go last.
fn sort_by_time(events: &mut [XesEvent]) {
    events.sort_by_key(|event| (event.time.is_none(), event.time.unwrap_or(0)));
}

fn unescape(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    if !text.contains('&') {
        return text.into_owned();
    }
    match quick_xml::escape::unescape(&text) {
        Ok(unescaped) => unescaped.into_owned(),
        Err(_) => text.into_owned(),
    }
}

/// Parses an XES date (`2010-12-30T14:32:00.000+01:00`, `...Z`, or without zone = UTC)
/// into nanoseconds since the Unix epoch.
fn parse_timestamp(text: &str) -> Option<i64> {
    let bytes = text.trim().as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = bytes.get(range)?;
        let mut value = 0i64;
        for &b in part {
            if !b.is_ascii_digit() {
                return None;
            }
            value = value * 10 + i64::from(b - b'0');
        }
        Some(value)
    };
    let year = digits(0..4)?;
    let month = digits(5..7)?;
    let day = digits(8..10)?;
    if bytes.len() < 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return None;
    }
    let (mut hour, mut minute, mut second, mut nanos) = (0, 0, 0, 0i64);
    let mut pos = 10;
    if bytes.len() > 10 && (bytes[10] == b'T' || bytes[10] == b' ') {
        hour = digits(11..13)?;
        minute = digits(14..16)?;
        second = digits(17..19)?;
        pos = 19;
        if bytes.get(pos) == Some(&b'.') {
            pos += 1;
            let mut scale = 100_000_000i64;
            while let Some(&b) = bytes.get(pos) {
                if !b.is_ascii_digit() {
                    break;
                }
                nanos += i64::from(b - b'0') * scale;
                scale /= 10;
                pos += 1;
            }
        }
    }
    let offset_seconds = match bytes.get(pos) {
        None | Some(b'Z') => 0,
        Some(&sign @ (b'+' | b'-')) => {
            let hours = digits(pos + 1..pos + 3)?;
            let minutes_start = if bytes.get(pos + 3) == Some(&b':') { pos + 4 } else { pos + 3 };
            let minutes = digits(minutes_start..minutes_start + 2).unwrap_or(0);
            let offset = hours * 3600 + minutes * 60;
            if sign == b'+' { offset } else { -offset }
        }
        Some(_) => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_seconds;
    seconds.checked_mul(1_000_000_000)?.checked_add(nanos)
}

// Howard Hinnant's days-from-civil algorithm.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

fn format_rfc3339(nanos: i64) -> String {
    let seconds = nanos.div_euclid(1_000_000_000);
    let millis = nanos.rem_euclid(1_000_000_000) / 1_000_000;
    let days = seconds.div_euclid(86_400);
    let second_of_day = seconds.rem_euclid(86_400);
    // Inverse of `days_from_civil`.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// Reads a whole (small) XES document from a string, for tests and examples.
///
/// # Errors
///
/// As [`read_xes`].
pub fn parse_xes_str(text: &str) -> Result<XesLog, MiningError> {
    parse_xes(text.as_bytes(), &PathBuf::from("<string>"))
}

#[cfg(test)]
mod tests {
    use crate::parse_xes_str;
    use crate::xes::{XesRemark, format_rfc3339, parse_timestamp};

    #[test]
    fn timestamps_parse_with_offsets() {
        let a = parse_timestamp("2010-12-30T14:32:00.000+01:00").unwrap();
        let b = parse_timestamp("2010-12-30T13:32:00Z").unwrap();
        assert_eq!(a, b);
        assert_eq!(format_rfc3339(a), "2010-12-30T13:32:00.000Z");
        assert_eq!(parse_timestamp("1970-01-01T00:00:01.5"), Some(1_500_000_000));
        assert_eq!(parse_timestamp("not a date"), None);
    }

    #[test]
    fn events_sort_by_time_and_cases_merge_by_id() {
        let xes = parse_xes_str(
            r#"<log><trace><string key="concept:name" value="c1"/>
<event><string key="concept:name" value="b"/><date key="time:timestamp" value="2020-01-01T00:00:02Z"/></event>
<event><string key="concept:name" value="a"/><date key="time:timestamp" value="2020-01-01T00:00:01Z"/></event>
<event><string key="concept:name" value="x"/></event>
</trace>
<trace><string key="concept:name" value="c2"/></trace>
<trace><string key="concept:name" value="c1"/>
<event><string key="concept:name" value="c"/><date key="time:timestamp" value="2020-01-01T00:00:03Z"/>
<string key="nested"><string key="concept:name" value="ignored"/></string></event>
<event><string key="org:resource" value="nobody"/></event>
</trace></log>"#,
        )
        .unwrap();
        assert_eq!(xes.cases.len(), 1);
        let names: Vec<&str> = xes.cases[0].events.iter().map(|e| xes.activity(e)).collect();
        assert_eq!(names, ["b", "a", "x", "c"]);
        let log = xes.to_event_log();
        let sorted: Vec<&str> = log.variants()[0].activities.iter().map(|&a| log.activity(a)).collect();
        assert_eq!(sorted, ["a", "b", "c", "x"]);
        let steps: Vec<String> =
            xes.to_trajectories("t").remove(0).tool_calls().map(|call| call.tool.clone()).collect();
        assert_eq!(steps, ["a", "b", "c", "x"]);
        assert_eq!(xes.skipped_events, 1);
        assert_eq!(xes.to_event_log().n_events(), 4);
    }

    #[test]
    fn gzip_files_stream_through_the_decompressing_thread() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("flowmem-mining-xes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Enough events to span several chunks, and a compressed size above the threshold
        // (the padding is random so that it does not compress away).
        let mut xml = String::from("<log>");
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for case in 0..3000 {
            xml.push_str(&format!(r#"<trace><string key="concept:name" value="{case}"/>"#));
            for activity in ["a", "b", "c"] {
                let padding: String = (0..60)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        char::from(b'a' + (seed % 26) as u8)
                    })
                    .collect();
                xml.push_str(&format!(
                    r#"<event><string key="concept:name" value="{activity}"/><string key="pad" value="{padding}"/></event>"#
                ));
            }
            xml.push_str("</trace>");
        }
        xml.push_str("</log>");
        let good = dir.join("good.xes.gz");
        let mut encoder =
            flate2::write::GzEncoder::new(std::fs::File::create(&good).unwrap(), flate2::Compression::fast());
        encoder.write_all(xml.as_bytes()).unwrap();
        encoder.finish().unwrap();
        assert!(std::fs::metadata(&good).unwrap().len() > super::PIPELINE_MIN_BYTES);
        let xes = crate::read_xes(&good).unwrap();
        assert_eq!((xes.cases.len(), xes.n_events()), (3000, 9000));
        let bad = dir.join("bad.xes.gz");
        // Corrupt data fails as an I/O error, small (inline) or large (threaded).
        let mut corrupt = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff];
        std::fs::write(&bad, &corrupt).unwrap();
        let err = crate::read_xes(&bad).unwrap_err();
        assert!(matches!(err, crate::MiningError::Io { .. }), "{err:?}");
        corrupt.resize(super::PIPELINE_MIN_BYTES as usize + 1, 0xff);
        std::fs::write(&bad, &corrupt).unwrap();
        let err = crate::read_xes(&bad).unwrap_err();
        assert!(matches!(err, crate::MiningError::Io { .. }), "{err:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn malformed_xml_is_an_error_naming_the_position() {
        let err = parse_xes_str("<log><trace></log>").unwrap_err();
        assert!(err.to_string().contains("malformed XES"), "{err}");
        assert!(parse_xes_str("<other/>").is_err());
    }
    /// Issue 27 (3, 13): merged traces, empty traces and unparseable timestamps are
    /// reported, each with its trace (and event), in file order.
    #[test]
    fn merges_empty_traces_and_bad_timestamps_are_remarked() {
        let xes = parse_xes_str(
            r#"<log><trace><string key="concept:name" value="c1"/>
<event><string key="concept:name" value="a"/><date key="time:timestamp" value="2020-01-01T00:00:01Z"/></event>
</trace>
<trace><string key="concept:name" value="c2"/></trace>
<trace></trace>
<trace><string key="concept:name" value="c1"/>
<event><string key="concept:name" value="b"/><date key="time:timestamp" value="soon"/></event>
</trace></log>"#,
        )
        .unwrap();
        assert_eq!(
            xes.remarks,
            [
                XesRemark::EmptyTrace { case: Some("c2".into()), trace: 2 },
                XesRemark::EmptyTrace { case: None, trace: 3 },
                XesRemark::BadTimestamp { case: "c1".into(), trace: 4, event: 1, value: "soon".into() },
                XesRemark::RepeatedCase { case: "c1".into(), trace: 4, first_trace: 1 },
            ]
        );
        assert_eq!(xes.cases.len(), 1, "the merge itself stays, as in PM4Py");
        assert!(xes.remarks[2].to_string().contains("`soon`"), "{}", xes.remarks[2]);
    }

    /// Found by the seed corpus of the `xes` fuzz target: a self-closing `<trace/>` was
    /// left out without a remark, and a self-closing `<event/>` was not counted.
    #[test]
    fn self_closing_traces_and_events_are_reported() {
        let xes = parse_xes_str(
            r#"<log><trace/><trace><string key="concept:name" value="c1"/><event/>
<event><string key="concept:name" value="a"/></event></trace></log>"#,
        )
        .unwrap();
        assert_eq!(xes.remarks, [XesRemark::EmptyTrace { case: None, trace: 1 }]);
        assert_eq!(xes.skipped_events, 1);
        assert_eq!(xes.cases.len(), 1);
        assert_eq!(xes.cases[0].id, "c1");
    }
}
