"""Long-form rendering: a manuscript (.txt, .md, .epub) to a mastered, chaptered audiobook.

Qt-free; used by ``s2studio render`` and the app's Book view alike. The pieces:

* :mod:`~s2studio.book.importing` — a file → chapters of normalised paragraphs
  (:mod:`~s2studio.book.normalise` holds the documented rules);
* :mod:`~s2studio.book.manuscript` — chapters → paragraphs → sentences with seeds, voices and
  keys; :mod:`~s2studio.book.cast` and :mod:`~s2studio.book.dictionary`;
* :mod:`~s2studio.book.project` — the book folder: manuscript, render state, sentence audio;
* :mod:`~s2studio.book.renderer` — N sentences at once through the engine interface;
* :mod:`~s2studio.book.mastering` — chapters assembled with room tone, loudness presets, the
  ACX report, chapter files and the chaptered book file.

Front-end rules apply: only the engine's public modules are used (tests/test_boundaries.py).
"""

from s2studio.book.cast import Cast
from s2studio.book.dictionary import Pronunciation, PronunciationDictionary
from s2studio.book.importing import ImportedBook, ImportedChapter, import_book
from s2studio.book.manuscript import Chapter, Manuscript, Paragraph, Sentence, SentenceJob, SentenceRef
from s2studio.book.project import BookProject
from s2studio.book.renderer import BookRenderer, RenderProgress, RenderSummary, check_parallel, default_parallel

__all__ = ["BookProject", "BookRenderer", "Cast", "Chapter", "ImportedBook", "ImportedChapter", "Manuscript",
           "Paragraph", "Pronunciation", "PronunciationDictionary", "RenderProgress", "RenderSummary", "Sentence",
           "SentenceJob", "SentenceRef", "check_parallel", "default_parallel", "import_book"]
