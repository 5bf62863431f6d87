//! The text inside every string ID ([`IdText`]): immutable, shared by its clones behind one
//! reference count like an `Arc<str>` (in one pointer), and clonable many times for one change of
//! that count.

use std::alloc::{self, Layout};
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{self, AtomicUsize, Ordering};

/// The start of an [`IdText`]'s allocation; the text's bytes follow it.
#[repr(C)]
struct Head {
    /// How many `IdText`s share the allocation.
    count: AtomicUsize,
    /// The text's length in bytes.
    len: usize,
}

/// Where the text starts in the allocation: right after the head (bytes need no alignment).
const TEXT_AT: usize = size_of::<Head>();

/// More references than this abort the process, as `Arc` does: they can only come from clones
/// leaked in a loop, and the count must never wrap.
const MAX_COUNT: usize = isize::MAX as usize;

/// An immutable string shared by its clones: what `Arc<str>` is, in one pointer instead of two,
/// plus [`IdText::clone_many`], which makes any number of clones for one atomic add.
///
/// Every streamed event carries a clone of its turn's and its item's ID, made on the reader's
/// core and dropped on the session actor's. `Arc` raises its count one locked instruction per
/// clone (about a hundredth of the reader's time on the bench streams); made a burst at a time
/// through `clone_many`, the clones in a burst cost one. The length lives in the allocation,
/// beside the count, so an ID is a thin pointer: an [`Event`](crate::Event), which holds four,
/// is 224 bytes instead of 256, and every move of one on the way from the reader to a
/// subscriber is shorter. Reading the text reads the length from the line that holds the count;
/// the text itself starts on that line anyway.
pub(crate) struct IdText {
    head: NonNull<Head>,
}

// SAFETY: the text is never written after `new`, and the count is atomic; like `Arc<str>`, the
// value can be sent to and shared with other threads.
unsafe impl Send for IdText {}
// SAFETY: as above.
unsafe impl Sync for IdText {}

impl IdText {
    /// A copy of `text` in an allocation of its own, with one reference.
    pub(crate) fn new(text: &str) -> Self {
        let layout = Self::layout(text.len());
        // SAFETY: the layout is not zero-sized: it holds at least the head.
        let start = unsafe { alloc::alloc(layout) };
        let Some(head) = NonNull::new(start.cast::<Head>()) else { alloc::handle_alloc_error(layout) };
        // SAFETY: `start` is a fresh allocation of `layout`: a `Head` at its start (aligned as
        // the layout is) and `text.len()` bytes at `TEXT_AT`, which do not overlap `text`.
        unsafe {
            head.as_ptr().write(Head { count: AtomicUsize::new(1), len: text.len() });
            std::ptr::copy_nonoverlapping(text.as_ptr(), start.add(TEXT_AT), text.len());
        }
        IdText { head }
    }

    /// The allocation for a text of `len` bytes: the head, then the bytes.
    fn layout(len: usize) -> Layout {
        let text = Layout::array::<u8>(len).expect("the length of an existing string");
        let (layout, at) = Layout::new::<Head>().extend(text).expect("an ID's text and its head fit in memory");
        debug_assert_eq!(at, TEXT_AT);
        layout.pad_to_align()
    }

    #[inline]
    fn head(&self) -> &Head {
        // SAFETY: the allocation lives while any `IdText` refers to it, `self` among them.
        unsafe { self.head.as_ref() }
    }

    /// The text.
    #[inline]
    pub(crate) fn as_str(&self) -> &str {
        // SAFETY: `new` copied `len` bytes of a `&str` to `TEXT_AT`, and nothing writes them
        // again; the allocation lives as long as `self`.
        unsafe {
            let bytes = std::slice::from_raw_parts(self.head.as_ptr().cast::<u8>().add(TEXT_AT), self.head().len);
            std::str::from_utf8_unchecked(bytes)
        }
    }

    /// Whether the two share one allocation (then their texts are equal without a look).
    #[inline]
    pub(crate) fn ptr_eq(&self, other: &IdText) -> bool {
        self.head == other.head
    }

    /// Pushes `n` clones onto `into`, each wrapped by `wrap`, raising the count once for all of
    /// them.
    pub(crate) fn clone_many<T>(&self, n: usize, into: &mut Vec<T>, wrap: impl Fn(IdText) -> T) {
        // Room first: once the count is raised, nothing may fail before the clones exist.
        into.reserve(n);
        self.add(n);
        into.extend(std::iter::repeat_n(self.head, n).map(|head| wrap(IdText { head })));
    }

    /// Adds `n` references; aborts above [`MAX_COUNT`].
    #[inline]
    fn add(&self, n: usize) {
        // Relaxed, as `Arc::clone`: a new reference comes from an existing one, so the
        // allocation cannot be freed meanwhile, and nothing else is published through it.
        let old = self.head().count.fetch_add(n, Ordering::Relaxed);
        if old > MAX_COUNT - n.min(MAX_COUNT) {
            std::process::abort();
        }
    }

    #[cfg(test)]
    fn count(&self) -> usize {
        self.head().count.load(Ordering::Relaxed)
    }
}

impl Clone for IdText {
    #[inline]
    fn clone(&self) -> Self {
        self.add(1);
        IdText { head: self.head }
    }
}

impl Drop for IdText {
    #[inline]
    fn drop(&mut self) {
        // As `Arc`'s drop: each release orders this clone's uses before the last one's free.
        if self.head().count.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        atomic::fence(Ordering::Acquire);
        // SAFETY: this was the last reference, and `new` allocated exactly this layout.
        unsafe { alloc::dealloc(self.head.as_ptr().cast::<u8>(), Self::layout(self.head().len)) }
    }
}

impl PartialEq for IdText {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.ptr_eq(other) || self.as_str() == other.as_str()
    }
}

impl Eq for IdText {}

impl PartialOrd for IdText {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for IdText {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl std::hash::Hash for IdText {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_str().hash(state)
    }
}

impl fmt::Debug for IdText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl serde::Serialize for IdText {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl From<&str> for IdText {
    fn from(text: &str) -> Self {
        IdText::new(text)
    }
}

impl From<String> for IdText {
    fn from(text: String) -> Self {
        IdText::new(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_text_and_the_last_one_frees_it() {
        let text = IdText::new("turn_01JABC");
        let mut clones = Vec::new();
        text.clone_many(64, &mut clones, |c| c);
        assert_eq!(text.count(), 65);
        assert!(clones.iter().all(|clone| clone.ptr_eq(&text) && clone.as_str() == "turn_01JABC"));
        let one = clones[3].clone();
        assert_eq!(text.count(), 66);
        clones.truncate(10);
        assert_eq!(text.count(), 12);
        drop(text);
        assert_eq!(one.count(), 11);
        clones.clear();
        assert_eq!(one.count(), 1);
        assert_eq!(one.as_str(), "turn_01JABC", "the last clone still reads its text");
    }

    #[test]
    fn any_text_round_trips_whatever_its_length() {
        for text in ["", "a", "seven b", "eight by", "ünïcödé ✓", &"x".repeat(1000)] {
            let id = IdText::from(text);
            assert_eq!(id.as_str(), text);
            let mut many = Vec::new();
            id.clone_many(0, &mut many, |c| c);
            assert!(many.is_empty());
            assert_eq!(id.count(), 1, "no clones, no references");
            assert_eq!(id.clone(), IdText::from(String::from(text)));
        }
    }

    #[test]
    fn an_id_is_one_pointer() {
        assert_eq!(size_of::<IdText>(), size_of::<usize>());
        assert_eq!(size_of::<Option<crate::TurnId>>(), size_of::<usize>(), "the pointer is never null");
        assert_eq!(size_of::<crate::ItemId>(), size_of::<usize>());
    }

    #[test]
    fn texts_compare_and_order_as_strings() {
        let (a, b) = (IdText::from("a"), IdText::from("b"));
        assert!(a < b && a != b);
        assert_eq!(a, IdText::from("a"), "equal without sharing");
        assert_eq!(format!("{a:?}"), "\"a\"");
        assert_eq!(serde_json::to_string(&b).unwrap(), "\"b\"");
    }

    #[test]
    fn clones_go_to_other_threads_and_are_freed_there() {
        let text = IdText::from("item_1");
        let mut clones = Vec::new();
        text.clone_many(1000, &mut clones, |c| c);
        let handles: Vec<_> = clones
            .chunks(100)
            .map(|chunk| chunk.to_vec())
            .map(|chunk| std::thread::spawn(move || chunk.iter().all(|c| c.as_str() == "item_1")))
            .collect();
        drop(clones);
        assert!(handles.into_iter().all(|h| h.join().unwrap()));
        assert_eq!(text.count(), 1);
    }
}
