"""A synthetic multilingual corpus and synthetic XTREME-format tasks.

The offline demo needs multilingual data that a tiny model can learn
from in minutes on a CPU and that still shows *zero-shot cross-lingual
transfer*. This module invents a handful of "languages" that share one latent
grammar but differ in vocabulary, script and (for some) word order:

  * One latent grammar over 79 concepts: persons (given name plus optional
    family name), places (name plus optional type word such as "river"),
    organisations (name plus type word), thing verbs and social verbs,
    nouns, adjectives and counts. Selectional preferences (each verb prefers
    some nouns, each person some places) give every language the same
    co-occurrence statistics, the signal that lets monolingual pre-training
    align languages, as for mBERT.
  * Each language spells every concept with its own made-up word in its own
    script (Latin, Cyrillic, Greek, Devanagari, Georgian) and has its own
    plural suffix, adjective position, adposition side and clause order.
  * Shared anchors are spelt identically in every language: ASCII digits,
    every name (persons, places, organisations: "Alma", "Lima", "Zenit") and
    six loan words ("buk" for book, "bai" for buy; `LOAN_WORDS`). Real
    languages share these too: numbers, names of people, places and firms
    in Wikipedia text, and loans such as "taxi", "radio" or "internet".
    Everything else (function words, the other nouns, verbs and
    adjectives, the type words, the plural suffixes and every word order)
    is each language's own. Anchors are what lets multilingual MLM map the
    languages onto each other (Pires et al., 2019; K et al., 2020); a tiny
    model pre-trained for minutes needs them to be frequent, which is why
    every name is one (docs/DEMO_RESULTS.md measures fewer anchors).

Generation is pure Python and deterministic: lexicons depend only on the
language code, samples only on (seed, task, split, language). Dev and test
sets are *parallel* across languages, as in XNLI/PAWS-X/XQuAD: the latent
examples of a split are drawn once and realised in every language.

`synthetic_files.generate(workdir, ...)` writes them to disk in XTREME's
layouts; `synthetic_baselines.chance_levels(workdir)` gives trivial-baseline
scores for the demo's table.
"""

import dataclasses
import functools
import random
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple, Union


# --------------------------------------------------------------------------
# Languages.


@dataclasses.dataclass(frozen=True)
class LanguageSpec:
  """How one synthetic language realises the shared latent grammar.

  Attributes:
    code: short code used in file names and CoNLL token prefixes.
    name: human-readable description.
    script: key of the syllable inventory its words are made from.
    clause_order: "SVO", "SOV" or "VSO".
    adjective_first: adjective before (True) or after (False) the noun.
    prepositions: adposition before (True) or after (False) the place.
    type_first: type word ("river", "bank") before (True) or after (False)
      the name of a place or organisation.
    period: sentence-final punctuation.
    question_mark: question-final punctuation.
  """
  code: str
  name: str
  script: str
  clause_order: str
  adjective_first: bool
  prepositions: bool
  type_first: bool
  period: str = "."
  question_mark: str = "?"


# Codes come from ISO 639-3's private-use range qaa-qtz, so they pass
# language-code checks (text_sources) yet never name a real language.
LANGUAGES: Tuple[LanguageSpec, ...] = (
    LanguageSpec("qla", "Latin script, SVO (the 'English' training language)",
                 "latin", "SVO", True, True, False),
    LanguageSpec("qcy", "Cyrillic script, SVO, noun-adjective, type-name",
                 "cyrillic", "SVO", False, True, True),
    LanguageSpec("qgr", "Greek script, SVO", "greek", "SVO", True, True, False,
                 question_mark=";"),
    LanguageSpec("qdv", "Devanagari script, SOV with postpositions",
                 "devanagari", "SOV", True, False, False, period="\u0964"),
    LanguageSpec("qka", "Georgian script, VSO, noun-adjective", "georgian",
                 "VSO", False, True, False),
    # Seven more, for runs that need a many-language vocabulary (the paper's
    # regime, where the embeddings are about half the model): the scripts
    # repeat, with their own words (lexicons are seeded by the code) and
    # word orders.
    LanguageSpec("qlb", "Latin script, SOV with postpositions", "latin",
                 "SOV", True, False, True),
    LanguageSpec("qcb", "Cyrillic script, VSO", "cyrillic", "VSO", True,
                 True, False),
    LanguageSpec("qgb", "Greek script, SOV, noun-adjective", "greek", "SOV",
                 False, False, True, question_mark=";"),
    LanguageSpec("qdb", "Devanagari script, SVO with prepositions",
                 "devanagari", "SVO", False, True, True, period="\u0964"),
    LanguageSpec("qkb", "Georgian script, SVO, type-name", "georgian", "SVO",
                 True, True, True),
    LanguageSpec("qlc", "Latin script, VSO, noun-adjective", "latin", "VSO",
                 False, True, False),
    LanguageSpec("qcc", "Cyrillic script, SOV with postpositions",
                 "cyrillic", "SOV", True, False, False),
)
LANGUAGE_BY_CODE = {spec.code: spec for spec in LANGUAGES}
DEFAULT_NUM_LANGUAGES = 4
TRAIN_LANGUAGE = "qla"

# Consonant and vowel inventories; words are strings of consonant+vowel
# syllables. Devanagari vowels are dependent signs ("" = inherent a).
_SCRIPTS = {
    "latin": ("bdfgklmnprstvz", "aeiou"),
    "cyrillic": ("бвгджзклмнпрстфхчш", "аеиоуыя"),
    "greek": ("βγδζθκλμνξπρστφχ", "αεηιουω"),
    "devanagari": (tuple("कखगचजटडतदनपबमयरलवसह"),
                   ("", "\u093e", "\u093f", "\u0940", "\u0941", "\u0947",
                    "\u094b")),
    "georgian": ("ბგდვზთკლმნპრსტქშჩხ", "აეიოუ"),
}

# --------------------------------------------------------------------------
# The latent inventory. Keys are "<class>:<gloss>"; anchors are spelt the same
# in every language.

_ANCHOR_GIVEN = ("Alma", "Boris", "Chen", "Dara", "Emil", "Farah", "Ivan",
                 "Jonas", "Hana", "Omar", "Lena", "Taro")
_ANCHOR_FAMILY = ("Kato", "Silva", "Novak", "Rossi", "Berg", "Moreau", "Sato",
                  "Haddad")
_ANCHOR_PLACES = ("Lima", "Oslo", "Kyoto", "Cairo", "Quito", "Perth", "Rome",
                  "Lagos", "Delhi", "Sofia")
_ANCHOR_ORGS = ("Zenit", "Orbis", "Vega", "Nova", "Astra")
ANCHOR_NAMES = _ANCHOR_GIVEN + _ANCHOR_FAMILY + _ANCHOR_PLACES + _ANCHOR_ORGS
# Loan words: four nouns and two thing verbs every language borrowed with
# one spelling (their plurals take each language's own suffix).
LOAN_WORDS = {"noun:book": "buk", "noun:boat": "bot", "noun:lamp": "lamp",
              "noun:fish": "fis", "verb:buy": "bai", "verb:paint": "pent"}
MAX_COUNT = 12
ANCHOR_WORDS = frozenset(ANCHOR_NAMES + tuple(LOAN_WORDS.values()) + tuple(
    str(n) for n in range(1, MAX_COUNT + 1)))

GIVEN = tuple(f"given:{a}" for a in _ANCHOR_GIVEN)
FAMILY = tuple(f"family:{a}" for a in _ANCHOR_FAMILY)
PLACES = tuple(f"place:{a}" for a in _ANCHOR_PLACES)
PLACE_TYPES = ("ptype:city", "ptype:river", "ptype:valley")
ORGS = tuple(f"org:{a}" for a in _ANCHOR_ORGS)
ORG_TYPES = ("otype:bank", "otype:club", "otype:school")
THING_VERBS = tuple("verb:" + v for v in (
    "buy", "sell", "carry", "paint", "find", "cook", "wash", "hide"))
SOCIAL_VERBS = tuple("verb:" + v for v in ("meet", "call", "help", "visit"))
NOUNS = tuple("noun:" + n for n in (
    "apple", "book", "boat", "chair", "cup", "fish", "hat", "key", "lamp",
    "rope", "stone", "bread"))
ADJECTIVES = tuple("adj:" + a for a in (
    "red", "old", "small", "big", "green", "heavy", "new", "wet"))
FUNCTION_WORDS = ("fn:in", "fn:plural", "q:who", "q:whom", "q:where",
                  "q:how_many")

TAGS = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG")


def lexicon(code: str) -> Dict[str, str]:
  """The surface word of every latent concept in one language.

  Depends only on the language code, so a language is the same whatever the
  data seed. Words are unique within a language and never equal an anchor.

  Args:
    code: a code from `LANGUAGES`.

  Returns:
    Dict from concept key (e.g. "verb:buy", "fn:plural") to surface string;
    anchors map to their shared spelling.
  """
  return dict(_lexicon(code))


@functools.lru_cache(maxsize=None)
def _lexicon(code: str) -> Dict[str, str]:
  spec = LANGUAGE_BY_CODE[code]
  consonants, vowels = _SCRIPTS[spec.script]
  rng = random.Random(f"lexicon-{code}")
  taken = set(ANCHOR_WORDS)
  # Languages in one script share no words (only the anchors): each avoids
  # the words of the languages before it in `LANGUAGES`.
  for other in LANGUAGES[:LANGUAGES.index(spec)]:
    if other.script == spec.script:
      taken.update(_lexicon(other.code).values())
  words = {}
  keys = (GIVEN + FAMILY + PLACES + PLACE_TYPES + ORGS + ORG_TYPES +
          THING_VERBS + SOCIAL_VERBS + NOUNS + ADJECTIVES + FUNCTION_WORDS)
  for key in keys:
    cls, gloss = key.split(":", 1)
    if gloss in ANCHOR_NAMES or key in LOAN_WORDS:
      words[key] = LOAN_WORDS.get(key, gloss)
      continue
    # Function words and suffixes short, as in natural languages. (Every
    # name is an anchor, so every word made here is lower-case.)
    syllables = 1 if cls in ("fn", "q") else 2
    while True:
      word = "".join(rng.choice(consonants) + rng.choice(vowels)
                     for _ in range(syllables))
      if word not in taken:
        break
    taken.add(word)
    words[key] = word
  return words


# --------------------------------------------------------------------------
# Latent structures.


class Entity(NamedTuple):
  """A named entity: kind in {PER, LOC, ORG} and its concept keys.

  keys is (given[, family]) for PER, (place[, place type]) for LOC and
  (org, org type) for ORG.
  """
  kind: str
  keys: Tuple[str, ...]


class Thing(NamedTuple):
  """An object noun phrase: count (0 = none, singular), adjective, noun."""
  count: int
  adjective: Optional[str]
  noun: str


class Event(NamedTuple):
  """One clause: subject VERB object [in place]."""
  subject: Entity
  verb: str
  obj: Union[Entity, Thing]
  place: Optional[Entity]


def _zipf_choice(rng: random.Random, items: Sequence[str]) -> str:
  # A mild Zipf law: some concepts frequent, none so rare a tiny model
  # never sees it.
  weights = [1.0 / (i + 1) ** 0.6 for i in range(len(items))]
  return rng.choices(items, weights)[0]


def _preferred(items: Sequence[str], index: int, k: int) -> List[str]:
  return [items[(3 * index + j) % len(items)] for j in range(k)]


class _Grammar:
  """Samples latent events with fixed selectional preferences."""

  def __init__(self, rng: random.Random):
    self.rng = rng

  def person(self, exclude: Sequence[str] = ()) -> Entity:
    given = _zipf_choice(self.rng, [g for g in GIVEN if g not in exclude])
    keys = (given,)
    if self.rng.random() < 0.5:
      keys += (_zipf_choice(self.rng, FAMILY),)
    return Entity("PER", keys)

  def org(self, exclude: Sequence[str] = ()) -> Entity:
    name = self.rng.choice([o for o in ORGS if o not in exclude])
    return Entity("ORG", (name, self.rng.choice(ORG_TYPES)))

  def place(self, subject: Entity, exclude: Sequence[str] = ()) -> Entity:
    home = _preferred(PLACES, GIVEN.index(subject.keys[0]), 3) if (
        subject.kind == "PER") else _preferred(
            PLACES, ORGS.index(subject.keys[0]) + 5, 3)
    home = [p for p in home if p not in exclude]
    if home and self.rng.random() < 0.8:
      name = self.rng.choice(home)
    else:
      name = self.rng.choice([p for p in PLACES if p not in exclude])
    keys = (name,)
    if self.rng.random() < 0.5:
      keys += (self.rng.choice(PLACE_TYPES),)
    return Entity("LOC", keys)

  def thing(self, verb: str) -> Thing:
    if self.rng.random() < 0.85:
      noun = self.rng.choice(_preferred(NOUNS, THING_VERBS.index(verb), 4))
    else:
      noun = self.rng.choice(NOUNS)
    adjective = None
    if self.rng.random() < 0.6:
      adjective = self.rng.choice(_preferred(ADJECTIVES, NOUNS.index(noun), 3))
    count = 0
    if self.rng.random() < 0.6:
      count = min(MAX_COUNT, 1 + int(self.rng.expovariate(0.25)))
    return Thing(count, adjective, noun)

  def event(self, exclude_given: Sequence[str] = (),
            exclude_verbs: Sequence[str] = (),
            exclude_places: Sequence[str] = ()) -> Event:
    if self.rng.random() < 0.85:
      subject = self.person(exclude_given)
    else:
      subject = self.org(exclude_given)
    if self.rng.random() < 0.7:
      verb = _zipf_choice(
          self.rng, [v for v in THING_VERBS if v not in exclude_verbs])
      obj = self.thing(verb)
    else:
      verb = self.rng.choice(
          [v for v in SOCIAL_VERBS if v not in exclude_verbs])
      taken = tuple(exclude_given) + (subject.keys[0],)
      obj = self.person(taken) if self.rng.random() < 0.75 else self.org(taken)
    place = None
    if self.rng.random() < 0.7:
      place = self.place(subject, exclude_places)
    return Event(subject, verb, obj, place)

  def perturb(self, event: Event) -> Event:
    """Changes one latent slot so that the meaning differs."""
    rng = self.rng
    options = ["subject", "verb"]
    if isinstance(event.obj, Thing):
      options += ["noun"]
      if event.obj.count:
        options.append("count")
      if event.obj.adjective:
        options.append("adjective")
    else:
      options.append("object")
      if event.subject.kind == "PER" and event.obj.kind == "PER":
        options.append("swap")
    if event.place is not None:
      options.append("place")
    option = rng.choice(options)
    names = [event.subject.keys[0]]
    if isinstance(event.obj, Entity):
      names.append(event.obj.keys[0])
    if option == "subject":
      return event._replace(subject=self._rename(event.subject, names))
    if option == "verb":
      pool = THING_VERBS if isinstance(event.obj, Thing) else SOCIAL_VERBS
      return event._replace(
          verb=rng.choice([v for v in pool if v != event.verb]))
    if option == "noun":
      return event._replace(obj=event.obj._replace(
          noun=rng.choice([n for n in NOUNS if n != event.obj.noun])))
    if option == "count":
      counts = [c for c in range(1, MAX_COUNT + 1) if c != event.obj.count]
      return event._replace(obj=event.obj._replace(count=rng.choice(counts)))
    if option == "adjective":
      return event._replace(obj=event.obj._replace(adjective=rng.choice(
          [a for a in ADJECTIVES if a != event.obj.adjective])))
    if option == "object":
      return event._replace(obj=self._rename(event.obj, names))
    if option == "swap":
      # PAWS-style: the same words, a different meaning.
      return event._replace(subject=event.obj, obj=event.subject)
    return event._replace(place=self._rename(event.place, [
        event.place.keys[0]]))

  def _rename(self, entity: Entity, taken: Sequence[str]) -> Entity:
    """The same kind of entity with another name (not in `taken`)."""
    pool = {"PER": GIVEN, "ORG": ORGS, "LOC": PLACES}[entity.kind]
    new = self.rng.choice([k for k in pool if k not in taken])
    return Entity(entity.kind, (new,) + entity.keys[1:])


# --------------------------------------------------------------------------
# Surface realisation.


class Token(NamedTuple):
  """A surface token with its NER tag and its role in the clause."""
  text: str
  tag: str = "O"
  role: str = ""
  attach: bool = False  # Written without a space before it (punctuation).


def _entity_tokens(entity: Entity, spec: LanguageSpec, lex: Dict[str, str],
                   role: str) -> List[Token]:
  words = [lex[k] for k in entity.keys]
  if spec.type_first and entity.kind in ("LOC", "ORG"):
    words = words[::-1]
  return [Token(w, ("B-" if i == 0 else "I-") + entity.kind, role)
          for i, w in enumerate(words)]


def _object_tokens(obj: Union[Entity, Thing], spec: LanguageSpec,
                   lex: Dict[str, str]) -> List[Token]:
  if isinstance(obj, Entity):
    return _entity_tokens(obj, spec, lex, "obj")
  noun = lex[obj.noun]
  if obj.count > 1:  # Number agreement: the noun takes the plural suffix.
    noun += lex["fn:plural"]
  phrase = [Token(noun, role="noun")]
  if obj.adjective:
    adjective = Token(lex[obj.adjective], role="adj")
    phrase = [adjective] + phrase if spec.adjective_first else phrase + [
        adjective]
  if obj.count:
    phrase = [Token(str(obj.count), role="count")] + phrase
  return phrase


def _place_tokens(place: Entity, spec: LanguageSpec,
                  lex: Dict[str, str]) -> List[Token]:
  adposition = Token(lex["fn:in"], role="adp")
  name = _entity_tokens(place, spec, lex, "place")
  return [adposition] + name if spec.prepositions else name + [adposition]


def _order(spec: LanguageSpec, s: List[Token], v: List[Token],
           o: List[Token]) -> List[Token]:
  return {"SVO": s + v + o, "SOV": s + o + v, "VSO": v + s + o}[
      spec.clause_order]


def realize_event(event: Event, spec: LanguageSpec, lex: Dict[str, str],
                  front_place: bool = False) -> List[Token]:
  """Tokens of one declarative sentence, final punctuation included.

  Args:
    event: the latent clause.
    spec: the language.
    lex: `lexicon(spec.code)`.
    front_place: put the place phrase first (a meaning-preserving variant).

  Returns:
    The tokens; the last one is the period.
  """
  subject = _entity_tokens(event.subject, spec, lex, "subj")
  verb = [Token(lex[event.verb], role="verb")]
  clause = _order(spec, subject, verb, _object_tokens(event.obj, spec, lex))
  if event.place is not None:
    place = _place_tokens(event.place, spec, lex)
    if front_place:
      clause = place + clause
    elif spec.clause_order == "SOV":
      clause = subject + place + clause[len(subject):]
    else:
      clause = clause + place
  return clause + [Token(spec.period, role="punct", attach=True)]


def question_types(event: Event) -> List[str]:
  """The question types that `event` can answer."""
  types = ["who"]
  if isinstance(event.obj, Entity):
    types.append("whom")
  elif event.obj.count:
    types.append("how_many")
  if event.place is not None:
    types.append("where")
  return types


def realize_question(event: Event, qtype: str, spec: LanguageSpec,
                     lex: Dict[str, str]) -> List[Token]:
  """Tokens of a question about `event`; the question word comes first."""
  qword = [Token(lex["q:" + qtype], role="qword")]
  subject = _entity_tokens(event.subject, spec, lex, "subj")
  verb = [Token(lex[event.verb], role="verb")]
  obj = _object_tokens(event.obj, spec, lex)
  if qtype == "who":
    body = obj + verb if spec.clause_order == "SOV" else verb + obj
  elif qtype == "whom":
    body = subject + verb if spec.clause_order != "VSO" else verb + subject
  elif qtype == "where":
    body = _order(spec, subject, verb, obj)
  else:  # how_many: the plural noun alone, like "how many apples".
    noun = [Token(lex[event.obj.noun] + lex["fn:plural"], role="noun")]
    body = noun + (subject + verb if spec.clause_order != "VSO" else
                   verb + subject)
  return qword + body + [Token(spec.question_mark, role="punct", attach=True)]


# The token role that answers each question type.
ANSWER_ROLE = {"who": "subj", "whom": "obj", "where": "place",
               "how_many": "count"}


def join_tokens(tokens: Sequence[Token]) -> Tuple[str, List[Tuple[int, int]]]:
  """Returns (text, offsets), offsets[i] = (start, end) of tokens[i] in text."""
  parts, offsets, position = [], [], 0
  for i, token in enumerate(tokens):
    if i and not token.attach:
      parts.append(" ")
      position += 1
    parts.append(token.text)
    offsets.append((position, position + len(token.text)))
    position += len(token.text)
  return "".join(parts), offsets


# --------------------------------------------------------------------------
# Example generators. Latent samples depend on (seed, task, split) only, so
# the dev and test sets of all languages are parallel; surface choices also
# depend on the language.


def _latent_rng(seed: int, task: str, split: str) -> random.Random:
  return random.Random(f"{seed}/{task}/{split}")


def _surface_rng(seed: int, task: str, split: str, code: str) -> random.Random:
  return random.Random(f"{seed}/{task}/{split}/{code}")


def make_corpus(code: str, num_sentences: int, seed: int = 0,
                question_fraction: float = 0.15) -> List[str]:
  """Monolingual sentences for pre-training (one string per sentence).

  The corpus of each language is drawn independently (not parallel): the
  model must align languages from shared structure and anchors only.
  """
  spec, lex = LANGUAGE_BY_CODE[code], lexicon(code)
  rng = _surface_rng(seed, "corpus", "all", code)
  grammar = _Grammar(rng)
  lines = []
  for _ in range(num_sentences):
    event = grammar.event()
    if rng.random() < question_fraction:
      tokens = realize_question(event, rng.choice(question_types(event)),
                                spec, lex)
    else:
      tokens = realize_event(event, spec, lex, rng.random() < 0.3)
    lines.append(join_tokens(tokens)[0])
  return lines


# The share of the pair task's negatives that are another event altogether
# (the rest change one or two slots of the same event). At 0.5 the demo's
# tiny models reached 66-68% in the training language and ~53-56% zero-shot;
# at 0.8 (and pair fine-tuned at 1e-3), 77-85% and 60-64%
# (docs/DEMO_RESULTS.md). Recorded in the data's
# manifest: data made with another value are not mixed with these.
PAIR_UNRELATED_FRACTION = 0.8


def make_pair_examples(code: str, split: str, num_examples: int,
                       seed: int = 0, two_slot_fraction: float = 0.5,
                       unrelated_fraction: float = PAIR_UNRELATED_FRACTION
                       ) -> List[Tuple[str, str, int]]:
  """Paraphrase pairs `(sentence1, sentence2, label)`, label 1 = same meaning.

  Labels alternate before shuffling, so they are exactly balanced. The place
  phrase of either sentence is fronted at random, independently of the label,
  so word order alone never gives the label away. Negatives are, in
  proportion `unrelated_fraction`, another event altogether (XNLI-style
  "neutral" pairs: little lexical overlap), otherwise the same event with one
  slot changed (two, with probability `two_slot_fraction`; PAWS-style
  adversarial pairs). A tiny model learns the first kind from lexical
  overlap, a mechanism that does not depend on the language.
  """
  spec, lex = LANGUAGE_BY_CODE[code], lexicon(code)
  latent = _latent_rng(seed, "pair", split)
  surface = _surface_rng(seed, "pair", split, code)
  grammar = _Grammar(latent)
  examples = []
  for i in range(num_examples):
    first = grammar.event()
    label = 1 - i % 2
    second = first
    if not label and latent.random() < unrelated_fraction:
      second = grammar.event()
      while second == first:
        second = grammar.event()
    elif not label:
      # One slot changed, often a second one too: a tiny model learns to
      # compare sentences from clear differences first.
      second = grammar.perturb(first)
      if latent.random() < two_slot_fraction:
        twice = grammar.perturb(second)
        second = twice if twice != first else second
    texts = [join_tokens(realize_event(e, spec, lex,
                                       surface.random() < 0.5))[0]
             for e in (first, second)]
    examples.append((texts[0], texts[1], label))
  latent.shuffle(examples)
  return examples


def make_tag_examples(code: str, split: str, num_sentences: int,
                      seed: int = 0) -> List[List[Tuple[str, str]]]:
  """NER sentences as lists of `(token, IOB2 tag)`."""
  spec, lex = LANGUAGE_BY_CODE[code], lexicon(code)
  grammar = _Grammar(_latent_rng(seed, "tag", split))
  surface = _surface_rng(seed, "tag", split, code)
  return [[(t.text, t.tag) for t in realize_event(
      grammar.event(), spec, lex, surface.random() < 0.3)]
          for _ in range(num_sentences)]


def make_qa_examples(code: str, split: str, num_questions: int, seed: int = 0,
                     sentences_per_context: int = 2,
                     questions_per_context: int = 2) -> Dict:
  """A SQuAD v1.1 dict with `num_questions` questions in total.

  Events within a context have distinct subjects, verbs and places, so every
  question has exactly one correct answer span.
  """
  spec, lex = LANGUAGE_BY_CODE[code], lexicon(code)
  latent = _latent_rng(seed, "qa", split)
  surface = _surface_rng(seed, "qa", split, code)
  grammar = _Grammar(latent)
  paragraphs = []
  remaining, index = num_questions, 0
  while remaining > 0:
    events = []
    for _ in range(sentences_per_context):
      taken_given = [e.subject.keys[0] for e in events]
      taken_given += [e.obj.keys[0] for e in events
                      if isinstance(e.obj, Entity)]
      events.append(grammar.event(
          exclude_given=taken_given,
          exclude_verbs=[e.verb for e in events],
          exclude_places=[e.place.keys[0] for e in events if e.place]))
    tokens, sentence_of = [], []
    for k, event in enumerate(events):
      sentence = realize_event(event, spec, lex, surface.random() < 0.3)
      tokens += sentence
      sentence_of += [k] * len(sentence)
    context, offsets = join_tokens(tokens)
    candidates = [(k, q) for k, e in enumerate(events)
                  for q in question_types(e)]
    latent.shuffle(candidates)
    qas = []
    for k, qtype in candidates[:min(questions_per_context, remaining)]:
      role = ANSWER_ROLE[qtype]
      span = [i for i, t in enumerate(tokens)
              if sentence_of[i] == k and t.role == role]
      start, end = offsets[span[0]][0], offsets[span[-1]][1]
      question = join_tokens(realize_question(events[k], qtype, spec, lex))[0]
      qas.append({"id": f"{split}-{index}-{len(qas)}", "question": question,
                  "answers": [{"text": context[start:end],
                               "answer_start": start}]})
    paragraphs.append({"context": context, "qas": qas})
    remaining -= len(qas)
    index += 1
  return {"version": "synthetic-1.1",
          "data": [{"title": f"synthetic-{code}-{split}",
                    "paragraphs": paragraphs}]}


# The tasks' vocabulary size: the languages have a few hundred surface
# words; SentencePiece refuses larger vocabularies on the default
# four-language corpus (339 pieces at most).
VOCAB_SIZE = 330
# QA windows and answer limit that fit the examples: the tasks
# (`rembert_tasks.synthetic`) and the models fine-tuned on them read these.
QA_SETTINGS = dict(max_seq_length=96, doc_stride=32, max_query_length=32,
                   max_answer_length=12, n_best=20)
