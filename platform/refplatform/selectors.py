"""Label and field selectors, parsed and matched exactly as kube-apiserver does.

Why this exists: ``?labelSelector=`` and ``?fieldSelector=`` are how kubectl,
the official clients and controllers narrow lists and watches, and how workload
objects (``metav1.LabelSelector``) pick their pods.  Drills compare the reference
platform with real clusters, so the grammar, the matching rules (``!=`` and
``notin`` match objects *without* the key) and the error messages follow
``k8s.io/apimachinery/pkg/labels`` and ``pkg/fields``; a client sees the same
``400 BadRequest`` text from either server.

Pure: no I/O, no clock.  Facts, not code, were taken from upstream.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from refplatform.errors import RefPlatformError

__all__ = [
    "OBJECT_FIELD_LABELS", "POD_FIELD_LABELS", "FieldOperator", "FieldRequirement", "FieldSelector",
    "LabelSelector", "Operator", "Requirement", "SelectorError", "object_fields", "pod_fields",
]


class SelectorError(RefPlatformError):
    """A label or field selector that does not parse or names an unsupported field.

    ``str(error)`` is upstream's message, which quotes the offending text.
    """


# --------------------------------------------------------------------------- validation

_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_MSG = ("must consist of alphanumeric characters, '-', '_' or '.', "
              "and must start and end with an alphanumeric character")
_LABEL_VALUE_FMT = f"({_QNAME_FMT})?"
_LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, "
                    "'-', '_' or '.', and must start and end with an alphanumeric character")
_DNS_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_FMT = _DNS_LABEL_FMT + r"(\." + _DNS_LABEL_FMT + ")*"
_DNS_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                      "'-' or '.', and must start and end with an alphanumeric character")
_QNAME_MAX = 63
_LABEL_VALUE_MAX = 63
_DNS_SUBDOMAIN_MAX = 253


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """Upstream ``validation.RegexError`` wording (including its double spaces)."""
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def _dns_subdomain_errors(value: str) -> list[str]:
    errs = []
    if len(value) > _DNS_SUBDOMAIN_MAX:
        errs.append(_max_len(_DNS_SUBDOMAIN_MAX))
    if not re.fullmatch(_DNS_SUBDOMAIN_FMT, value):
        errs.append(_regex_error(_DNS_SUBDOMAIN_MSG, _DNS_SUBDOMAIN_FMT, "example.com"))
    return errs


def _qualified_name_errors(value: str) -> list[str]:
    """Upstream ``IsQualifiedName``: an optional DNS-subdomain prefix, '/', and a name."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in _dns_subdomain_errors(prefix))
    else:
        return ["a qualified name " + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > _QNAME_MAX:
        errs.append("name part " + _max_len(_QNAME_MAX))
    if not re.fullmatch(_QNAME_FMT, name):
        errs.append("name part " + _regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc"))
    return errs


def _label_value_errors(value: str) -> list[str]:
    errs = []
    if len(value) > _LABEL_VALUE_MAX:
        errs.append(_max_len(_LABEL_VALUE_MAX))
    if not re.fullmatch(_LABEL_VALUE_FMT, value):
        errs.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def _quote(value: Any) -> str:
    """Go's ``%q`` for strings, JSON for anything else (as ``field.Error`` renders a bad value)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _invalid(path: str, value: Any, detail: str) -> str:
    """One ``field.Invalid`` error rendered as text."""
    return f"{path}: Invalid value: {_quote(value)}: {detail}"


def _aggregate(errors: list[str]) -> str:
    """``utilerrors.Aggregate.Error()``: one message as is, several as ``[a, b]``."""
    unique = list(dict.fromkeys(errors))
    return unique[0] if len(unique) == 1 else "[" + ", ".join(unique) + "]"


_INT64 = re.compile(r"[+-]?[0-9]+")


def _parse_int64(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``, or None where it fails."""
    if not _INT64.fullmatch(text):
        return None
    value = int(text)
    return value if -(2 ** 63) <= value < 2 ** 63 else None


# --------------------------------------------------------------------------- label selectors


class Operator(enum.Enum):
    """A label requirement's operator; values are upstream's ``selection.Operator`` strings."""

    EQUALS = "="
    """``k=v``: the key is present with this value."""
    DOUBLE_EQUALS = "=="
    """``k==v``: same as ``=``; kept apart so the selector prints back as written."""
    NOT_EQUALS = "!="
    """``k!=v``: the key is absent or has another value."""
    IN = "in"
    """``k in (a,b)``: the key is present with one of the values."""
    NOT_IN = "notin"
    """``k notin (a,b)``: the key is absent or has none of the values."""
    EXISTS = "exists"
    """``k``: the key is present, with any value."""
    DOES_NOT_EXIST = "!"
    """``!k``: the key is absent."""
    GREATER_THAN = "gt"
    """``k>5``: the key is present and its value, an integer, is greater."""
    LESS_THAN = "lt"
    """``k<5``: the key is present and its value, an integer, is less."""


_SET_OPS = (Operator.IN, Operator.NOT_IN)
_EXACT_OPS = (Operator.EQUALS, Operator.DOUBLE_EQUALS, Operator.NOT_EQUALS)
_UNARY_OPS = (Operator.EXISTS, Operator.DOES_NOT_EXIST)
_NUMERIC_OPS = (Operator.GREATER_THAN, Operator.LESS_THAN)
_INFIX = {Operator.EQUALS: "=", Operator.DOUBLE_EQUALS: "==", Operator.NOT_EQUALS: "!=",
          Operator.IN: " in ", Operator.NOT_IN: " notin ", Operator.GREATER_THAN: ">",
          Operator.LESS_THAN: "<"}
_BINARY_OPERATOR_NAMES = "in, notin, =, ==, !=, gt, lt"


@dataclass(frozen=True)
class Requirement:
    """One condition on one label key; build with :meth:`new` to get upstream's validation."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    @classmethod
    def new(cls, key: str, operator: Operator, values: Collection[str] = (), *,
            key_path: str = "key") -> "Requirement":
        """Upstream ``labels.NewRequirement``; raises :class:`SelectorError` with all problems found."""
        vals = list(values)
        errs: list[str] = []
        key_errs = _qualified_name_errors(key)
        if key_errs:
            errs.append(_invalid(key_path, key, "; ".join(key_errs)))
        if operator in _SET_OPS and not vals:
            errs.append(_invalid("values", vals or None, "for 'in', 'notin' operators, values set can't be empty"))
        elif operator in _EXACT_OPS and len(vals) != 1:
            errs.append(_invalid("values", vals or None, "exact-match compatibility requires one single value"))
        elif operator in _UNARY_OPS and vals:
            errs.append(_invalid("values", vals, "values set must be empty for exists and does not exist"))
        elif operator in _NUMERIC_OPS:
            if len(vals) != 1:
                errs.append(_invalid("values", vals or None,
                                     "for 'Gt', 'Lt' operators, exactly one value is required"))
            errs.extend(_invalid(f"values[{i}]", v, "for 'Gt', 'Lt' operators, the value must be an integer")
                        for i, v in enumerate(vals) if _parse_int64(v) is None)
        for i, v in enumerate(vals):
            value_errs = _label_value_errors(v)
            if value_errs:
                errs.append(_invalid(f"values[{i}][{key}]", v, "; ".join(value_errs)))
        if errs:
            raise SelectorError(_aggregate(errs))
        return cls(key, operator, tuple(vals))

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set satisfies this requirement (upstream ``Requirement.Matches``)."""
        op = self.operator
        if op is Operator.EXISTS:
            return self.key in labels
        if op is Operator.DOES_NOT_EXIST:
            return self.key not in labels
        if self.key not in labels:
            return op in (Operator.NOT_IN, Operator.NOT_EQUALS)
        value = labels[self.key]
        if op in (Operator.IN, Operator.EQUALS, Operator.DOUBLE_EQUALS):
            return value in self.values
        if op in (Operator.NOT_IN, Operator.NOT_EQUALS):
            return value not in self.values
        have = _parse_int64(value)
        want = _parse_int64(self.values[0]) if len(self.values) == 1 else None
        if have is None or want is None:
            return False
        return have > want if op is Operator.GREATER_THAN else have < want

    def __str__(self) -> str:
        if self.operator is Operator.EXISTS:
            return self.key
        if self.operator is Operator.DOES_NOT_EXIST:
            return "!" + self.key
        values = ",".join(sorted(self.values))
        if self.operator in _SET_OPS:
            values = f"({values})"
        return f"{self.key}{_INFIX[self.operator]}{values}"


@dataclass(frozen=True)
class LabelSelector:
    """An AND of requirements, sorted by key as upstream does.

    The empty selector matches everything; ``matches_nothing`` is the selector a
    *nil* ``metav1.LabelSelector`` converts to, which matches no object at all.
    """

    requirements: tuple[Requirement, ...] = ()
    matches_nothing: bool = False

    @classmethod
    def parse(cls, text: str) -> "LabelSelector":
        """Parse the ``?labelSelector=`` syntax (upstream ``labels.Parse``)."""
        return cls(_sort_by_key(_LabelParser(text).parse()))

    @classmethod
    def from_dict(cls, selector: Mapping[str, Any] | None) -> "LabelSelector":
        """Convert a structured ``metav1.LabelSelector`` (upstream ``LabelSelectorAsSelector``)."""
        if selector is None:
            return cls(matches_nothing=True)
        match_labels = selector.get("matchLabels") or {}
        expressions = selector.get("matchExpressions") or []
        reqs = [Requirement.new(k, Operator.EQUALS, [v]) for k, v in match_labels.items()]
        for expr in expressions:
            op_name = expr.get("operator")
            op = _STRUCTURED_OPERATORS.get(op_name) if isinstance(op_name, str) else None
            if op is None:
                raise SelectorError(f"{_quote(op_name if op_name is not None else '')} "
                                    "is not a valid label selector operator")
            reqs.append(Requirement.new(expr.get("key", ""), op, expr.get("values") or []))
        return cls(_sort_by_key(reqs))

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything (it matches every object)."""
        return not self.requirements and not self.matches_nothing

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether an object with these labels is selected."""
        if self.matches_nothing:
            return False
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


_STRUCTURED_OPERATORS = {"In": Operator.IN, "NotIn": Operator.NOT_IN, "Exists": Operator.EXISTS,
                         "DoesNotExist": Operator.DOES_NOT_EXIST}


def _sort_by_key(reqs: list[Requirement]) -> tuple[Requirement, ...]:
    return tuple(sorted(reqs, key=lambda r: r.key))


class _Tok(enum.Enum):
    """Lexer tokens of the label-selector grammar (upstream ``labels.Token``)."""

    END = enum.auto()
    CLOSE_PAR = enum.auto()
    COMMA = enum.auto()
    NOT = enum.auto()
    DOUBLE_EQUALS = enum.auto()
    EQUALS = enum.auto()
    GREATER = enum.auto()
    IDENT = enum.auto()
    IN = enum.auto()
    LESS = enum.auto()
    NOT_EQUALS = enum.auto()
    NOT_IN = enum.auto()
    OPEN_PAR = enum.auto()


_LITERALS = {")": _Tok.CLOSE_PAR, ",": _Tok.COMMA, "!": _Tok.NOT, "==": _Tok.DOUBLE_EQUALS,
             "=": _Tok.EQUALS, ">": _Tok.GREATER, "in": _Tok.IN, "<": _Tok.LESS,
             "!=": _Tok.NOT_EQUALS, "notin": _Tok.NOT_IN, "(": _Tok.OPEN_PAR}
_SPECIAL = frozenset("=!(),><")
_WHITESPACE = frozenset(" \t\r\n")
_OPERATOR_TOKENS = {_Tok.IN: Operator.IN, _Tok.EQUALS: Operator.EQUALS,
                    _Tok.DOUBLE_EQUALS: Operator.DOUBLE_EQUALS, _Tok.GREATER: Operator.GREATER_THAN,
                    _Tok.LESS: Operator.LESS_THAN, _Tok.NOT_IN: Operator.NOT_IN,
                    _Tok.NOT_EQUALS: Operator.NOT_EQUALS}


def _lex(text: str) -> list[tuple[_Tok, str]]:
    """Tokenize: specials greedily (longest known symbol), everything else up to a special or space."""
    items: list[tuple[_Tok, str]] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in _WHITESPACE:
            i += 1
        if i >= n:
            items.append((_Tok.END, ""))
            return items
        if text[i] in _SPECIAL:
            j, best = i, (_Tok.END, "")
            while j < n and text[j] in _SPECIAL and text[i:j + 1] in _LITERALS:
                j += 1
                best = (_LITERALS[text[i:j]], text[i:j])
            items.append(best)
            i = j
            continue
        j = i
        while j < n and text[j] not in _SPECIAL and text[j] not in _WHITESPACE:
            j += 1
        word = text[i:j]
        items.append((_LITERALS.get(word, _Tok.IDENT), word))
        i = j


class _LabelParser:
    """Recursive-descent parser over the token list, mirroring upstream's states and messages."""

    def __init__(self, text: str) -> None:
        self.items = _lex(text)
        self.pos = 0

    def _peek(self, values: bool = True) -> tuple[_Tok, str]:
        tok, lit = self.items[self.pos]
        if values and tok in (_Tok.IN, _Tok.NOT_IN):
            tok = _Tok.IDENT  # 'in' and 'notin' are ordinary words where a key or value is expected
        return tok, lit

    def _next(self, values: bool = True) -> tuple[_Tok, str]:
        item = self._peek(values)
        self.pos += 1
        return item

    def parse(self) -> list[Requirement]:
        reqs: list[Requirement] = []
        while True:
            tok, lit = self._peek()
            if tok is _Tok.END:
                return reqs
            if tok not in (_Tok.IDENT, _Tok.NOT):
                raise SelectorError(f"found '{lit}', expected: !, identifier, or 'end of string'")
            try:
                reqs.append(self._requirement())
            except SelectorError as exc:
                raise SelectorError(f"unable to parse requirement: {exc}") from None
            tok, lit = self._next()
            if tok is _Tok.END:
                return reqs
            if tok is not _Tok.COMMA:
                raise SelectorError(f"found '{lit}', expected: ',' or 'end of string'")
            tok, lit = self._peek()
            if tok not in (_Tok.IDENT, _Tok.NOT):
                raise SelectorError(f"found '{lit}', expected: identifier after ','")

    def _requirement(self) -> Requirement:
        operator: Operator | None = None
        tok, key = self._next()
        if tok is _Tok.NOT:
            operator = Operator.DOES_NOT_EXIST
            tok, key = self._next()
        if tok is not _Tok.IDENT:
            raise SelectorError(f"found '{key}', expected: identifier")
        key_errs = _qualified_name_errors(key)
        if key_errs:
            raise SelectorError(_invalid("<nil>", key, "; ".join(key_errs)))
        if operator is None and self._peek()[0] in (_Tok.END, _Tok.COMMA):
            operator = Operator.EXISTS
        if operator is not None:
            return Requirement.new(key, operator)
        tok, lit = self._next(values=False)
        op = _OPERATOR_TOKENS.get(tok)
        if op is None:
            raise SelectorError(f"found '{lit}', expected: {_BINARY_OPERATOR_NAMES}")
        values = self._value_set() if op in _SET_OPS else self._exact_value()
        return Requirement.new(key, op, sorted(values))

    def _value_set(self) -> set[str]:
        tok, lit = self._next()
        if tok is not _Tok.OPEN_PAR:
            raise SelectorError(f"found '{lit}' expected: '('")
        tok, lit = self._peek()
        if tok is _Tok.CLOSE_PAR:
            self._next()
            return {""}
        if tok not in (_Tok.IDENT, _Tok.COMMA):
            raise SelectorError(f"found '{lit}', expected: ',', ')' or identifier")
        values = self._identifier_list()
        self._next()  # the ')' that ended the list
        return values

    def _identifier_list(self) -> set[str]:
        values: set[str] = set()
        while True:
            tok, lit = self._next()
            if tok is _Tok.IDENT:
                values.add(lit)
                nxt, nlit = self._peek()
                if nxt is _Tok.CLOSE_PAR:
                    return values
                if nxt is not _Tok.COMMA:
                    raise SelectorError(f"found '{nlit}', expected: ',' or ')'")
            elif tok is _Tok.COMMA:
                if not values:
                    values.add("")  # "(," starts with an empty value
                nxt, _ = self._peek()
                if nxt is _Tok.CLOSE_PAR:
                    values.add("")  # ",)" ends with one
                    return values
                if nxt is _Tok.COMMA:
                    self._next()
                    values.add("")  # ",," has one between
            else:
                raise SelectorError(f"found '{lit}', expected: ',', or identifier")

    def _exact_value(self) -> set[str]:
        tok, _ = self._peek()
        if tok in (_Tok.END, _Tok.COMMA):
            return {""}
        tok, lit = self._next()
        if tok is not _Tok.IDENT:
            raise SelectorError(f"found '{lit}', expected: identifier")
        return {lit}


# --------------------------------------------------------------------------- field selectors


class FieldOperator(enum.Enum):
    """A field requirement's operator (``==`` parses as ``=``, as upstream)."""

    EQUALS = "="
    """The field's value equals the given one (a missing field counts as "")."""
    NOT_EQUALS = "!="
    """The field's value differs from the given one."""


@dataclass(frozen=True)
class FieldRequirement:
    """One ``field=value`` or ``field!=value`` term."""

    field: str
    operator: FieldOperator
    value: str

    def matches(self, fields: Mapping[str, str]) -> bool:
        equal = fields.get(self.field, "") == self.value
        return equal if self.operator is FieldOperator.EQUALS else not equal

    def __str__(self) -> str:
        return f"{self.field}{self.operator.value}{_escape_field_value(self.value)}"


@dataclass(frozen=True)
class FieldSelector:
    """An AND of field terms; the empty selector matches everything."""

    requirements: tuple[FieldRequirement, ...] = ()

    @classmethod
    def parse(cls, text: str, supported: Collection[str] | Mapping[str, str]) -> "FieldSelector":
        """Parse ``?fieldSelector=`` (upstream ``fields.ParseSelector`` plus the field-label check).

        ``supported`` lists the field labels the resource accepts; a mapping may also
        rename (e.g. pods' legacy ``spec.host`` means ``spec.nodeName``).  Terms are
        sorted, whitespace is significant and values may escape ``\\``, ``,`` and ``=``,
        all as upstream.
        """
        terms = sorted(_split_terms(text))
        reqs: list[FieldRequirement] = []
        for term in terms:
            if not term:
                continue
            split = _split_term(term)
            if split is None:
                raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
            lhs, op, rhs = split
            op_kind = FieldOperator.NOT_EQUALS if op == "!=" else FieldOperator.EQUALS
            reqs.append(FieldRequirement(lhs, op_kind, _unescape_field_value(rhs)))
        renamed = []
        for req in reqs:
            if req.field not in supported:
                raise SelectorError(f"field label not supported: {req.field}")
            name = supported[req.field] if isinstance(supported, Mapping) else req.field
            renamed.append(FieldRequirement(name, req.operator, req.value))
        return cls(tuple(renamed))

    @property
    def empty(self) -> bool:
        """True when the selector does not restrict anything."""
        return not self.requirements

    def matches(self, fields: Mapping[str, str]) -> bool:
        """Whether an object with this field set is selected."""
        return all(r.matches(fields) for r in self.requirements)

    def __str__(self) -> str:
        return ",".join(str(r) for r in self.requirements)


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not escaped with a backslash."""
    if not text:
        return []
    terms, start, escaped = [], 0, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == ",":
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return terms


def _split_term(term: str) -> tuple[str, str, str] | None:
    """Split at the first operator; '!=' and '==' win over '=' at the same position."""
    for i in range(len(term)):
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return term[:i], op, term[i + len(op):]
    return None


def _escape_field_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def _unescape_field_value(value: str) -> str:
    if not any(c in value for c in "\\,="):
        return value
    out, escaped = [], False
    for ch in value:
        if escaped:
            if ch not in "\\,=":
                raise SelectorError(f"invalid field selector: invalid escape sequence: \\{ch}")
            out.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch in ",=":
            # Upstream prints the rune with %v, i.e. as its code point number.
            raise SelectorError(f"invalid field selector: unescaped character in value: {ord(ch)}")
        else:
            out.append(ch)
    if escaped:
        raise SelectorError("invalid field selector: invalid escape sequence: \\")
    return "".join(out)


OBJECT_FIELD_LABELS: tuple[str, ...] = ("metadata.name", "metadata.namespace")
"""Field labels every namespaced resource accepts (cluster-scoped ones: ``metadata.name`` only)."""

POD_FIELD_LABELS: Mapping[str, str] = {
    **{label: label for label in (
        "metadata.name", "metadata.namespace", "spec.nodeName", "spec.restartPolicy",
        "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
        "status.podIP", "status.podIPs", "status.nominatedNodeName")},
    "spec.host": "spec.nodeName",
}
"""Field labels pods accept, mapped to the field they select (upstream's pod conversion func)."""


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def object_fields(obj: Mapping[str, Any], namespaced: bool) -> dict[str, str]:
    """The field set every object has: ``metadata.name`` and, if namespaced, ``metadata.namespace``."""
    meta = obj.get("metadata") or {}
    fields = {"metadata.name": _text(meta.get("name"))}
    if namespaced:
        fields["metadata.namespace"] = _text(meta.get("namespace"))
    return fields


def pod_fields(obj: Mapping[str, Any]) -> dict[str, str]:
    """A v1 Pod's selectable fields, as upstream's pod ``ToSelectableFields`` computes them."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    pod_ips = status.get("podIPs") or []
    first_ip = pod_ips[0].get("ip") if pod_ips and isinstance(pod_ips[0], Mapping) else status.get("podIP")
    return {
        "spec.nodeName": _text(spec.get("nodeName")),
        "spec.restartPolicy": _text(spec.get("restartPolicy")),
        "spec.schedulerName": _text(spec.get("schedulerName")),
        "spec.serviceAccountName": _text(spec.get("serviceAccountName")),
        "spec.hostNetwork": _text(bool(spec.get("hostNetwork"))),
        "status.phase": _text(status.get("phase")),
        "status.podIP": _text(first_ip),
        "status.nominatedNodeName": _text(status.get("nominatedNodeName")),
        **object_fields(obj, namespaced=True),
    }
