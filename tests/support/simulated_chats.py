"""Simulated agent conversations for the compaction benchmarks: seeded, tool-heavy, facts planted.

A conversation is a support agent's history as its client keeps it, never compacted: a system
prompt, then turns. Each turn is one user request, one to three rounds of assistant `tool_calls`
(some of them parallel) each followed by its `tool` results, then the assistant's answer. Tool
results are the bulk of it: order records and catalog searches as JSON (compact or indented),
service logs and support tickets as text, of varied size (a turn's size is log-normal around
`tokens_per_turn`, split unevenly among its calls), full of the numbers real results carry.

The client calls the model after each user request and after each round of tool results;
`Conversation.requests` records the length of the history at each of those calls, so replaying a
conversation means sending `messages[:n]` for each `n` in it.

Facts are planted in tool results at the head, the middle or the tail of a result: order numbers,
part numbers (`BW-4471`), ids (`RMA-…`, `TCK-…`, `cust_…`), amounts (`$129.00`), dates and error
lines. Each is recorded with the index of the message that holds it. Planted values come from
namespaces the filler never uses (filler parts are never `BW-`, filler prices carry no `$`, filler
dates are never in 2025, filler numbers are shorter than order numbers) and each planted value
occurs exactly once in the whole conversation, so "is the substring still there" measures whether
a compactor kept that fact. User requests and answers never repeat a planted value.

Deterministic: the same arguments give the same conversation, byte for byte (one seeded
`random.Random`, no set or hash ordering). ``python -m tests.support.simulated_chats`` prints a summary.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Message = dict[str, Any]

SYSTEM = (
    "You are the support and operations assistant of a bike shop. Use the tools to look up orders, "
    "parts, logs and tickets; never guess an order, part or invoice number. Answer briefly."
)
TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties},
        },
    }
    for name, description, properties in [
        (
            "get_order",
            "Everything about one order: lines, shipping, invoice, events.",
            {"customer": {"type": "string"}, "latest": {"type": "boolean"}},
        ),
        (
            "search_parts",
            "Search the parts catalog, with stock and price for each match.",
            {"query": {"type": "string"}, "limit": {"type": "integer"}},
        ),
        (
            "read_logs",
            "Read a service's recent log lines.",
            {"service": {"type": "string"}, "since": {"type": "string"}},
        ),
        ("get_ticket", "A support ticket with its whole message thread.", {"customer": {"type": "string"}}),
    ]
]
TOOLS = tuple(schema["function"]["name"] for schema in TOOL_SCHEMAS)

FACT_KINDS = ("order", "part", "id", "amount", "date", "error")
POSITIONS = ("head", "middle", "tail")


@dataclass(frozen=True, slots=True)
class Fact:
    kind: str  # one of FACT_KINDS
    value: str  # the exact text planted; it occurs once in the whole conversation
    message: int  # index in Conversation.messages of the tool result that holds it
    where: str  # one of POSITIONS: where in that result it was planted
    turn: int


@dataclass(frozen=True, slots=True)
class Conversation:
    messages: list[Message]
    requests: tuple[int, ...]  # the length of the history at each model call
    users: tuple[int, ...]  # the index of each user request
    facts: tuple[Fact, ...]
    seed: int
    tokens_per_turn: int

    @property
    def turns(self) -> int:
        return len(self.users)

    def history(self, k: int) -> list[Message]:
        """What the client sends at its `k`-th model call: the history so far, never compacted."""
        return self.messages[: self.requests[k]]

    def one_call_a_turn(self) -> Conversation:
        """The same chat, as if the client called the model only once a turn, with each user
        request (the tool rounds then happen between calls, unseen)."""
        return dataclasses.replace(self, requests=tuple(u + 1 for u in self.users))

    def turn_of_request(self) -> list[int]:
        """For each request, the turn it belongs to."""
        turns, t = [], -1
        for end in self.requests:
            while t + 1 < len(self.users) and self.users[t + 1] < end:
                t += 1
            turns.append(t)
        return turns


def simulate(turns: int = 200, *, tokens_per_turn: int = 1900, seed: int = 0) -> Conversation:
    """A tool-heavy agent chat of `turns` user requests, growing about `tokens_per_turn` tokens
    (four characters each) per turn on average."""
    return _Writer(random.Random(seed), tokens_per_turn).conversation(turns, seed)


# --------------------------------------------------------------------------------------------
# Vocabulary. Filler values never collide with planted ones (see the module docstring).

_FILLER_SKU = ("KX", "TR", "CH", "SP", "HB", "RM", "DR")
_PART_NAMES = (
    "front wheel 700c",
    "rear wheel 700c",
    "tubeless tyre 28mm",
    "disc brake pad",
    "chain 11s",
    "cassette 11-32",
    "bottom bracket BSA",
    "headset 1-1/8",
    "saddle comfort",
    "bar tape",
    "inner tube 700x25",
    "brake cable",
    "derailleur hanger",
    "pedals flat",
    "bell",
    "kickstand",
    "mudguard set",
    "rack rear",
    "light front 400lm",
    "crankset 50/34",
)
_STATUSES = ("delivered", "shipped", "processing", "returned", "on hold", "cancelled")
_CARRIERS = ("DHL", "UPS", "PostNL", "DPD", "GLS")
_EVENTS = (
    "label created",
    "picked",
    "packed",
    "handed to carrier",
    "in transit",
    "out for delivery",
    "delivered",
    "customer contacted",
    "address verified",
    "payment captured",
)
_SERVICES = ("carrier-api", "checkout", "inventory", "dispatch", "payments", "notifications")
_LOG_VERBS = (
    "processed batch {n} in {ms} ms",
    "synced {k} stock levels from warehouse W{w}",
    "picked {k} lines for wave {n}",
    "cache hit ratio {p}% over {k} lookups",
    "sent {k} notifications, queue depth {q}",
    "reconciled {k} payments for day {d}",
    "slow request GET /v2/orders/{n} took {ms} ms, retrying",
    "rate limit at {p}% of quota",
    "rebuilt search index shard {w} ({k} documents)",
    "heartbeat from node-{w} lag {ms} ms",
)
_WORDS = (
    "the",
    "customer",
    "wheel",
    "arrived",
    "box",
    "damaged",
    "replacement",
    "we",
    "can",
    "ship",
    "again",
    "warehouse",
    "stock",
    "refund",
    "invoice",
    "delivery",
    "address",
    "please",
    "confirm",
    "rim",
    "spokes",
    "bent",
    "photo",
    "attached",
    "courier",
    "left",
    "parcel",
    "neighbour",
    "week",
    "tomorrow",
    "morning",
    "sorry",
    "thanks",
    "size",
    "model",
    "fits",
    "frame",
    "order",
    "return",
    "label",
    "printed",
    "drop",
    "point",
    "store",
    "credit",
    "paid",
    "card",
    "twice",
    "charged",
)
_USER_ASKS = (
    "A customer writes that their last order arrived with a bent front wheel. What happened?",
    "Can you check whether the replacement part is in stock, and where?",
    "The carrier says the parcel was delivered but the customer has nothing. Look into it.",
    "Please open a return for the damaged item and tell me what the refund will be.",
    "Why did checkout fail for this customer this morning?",
    "Which wheel fits a 2019 gravel frame with disc brakes? Check the catalog.",
    "Summarise the ticket thread with this customer and what we promised them.",
    "Has the refund for the earlier return gone through?",
    "The customer wants to swap the tyre for a wider one. Is that possible on their order?",
    "Check the dispatch logs: was the order picked and packed on time?",
    "What did we charge this customer in total, and was anything charged twice?",
    "Find the invoice and the due date for this customer's last order.",
)
_ANSWERS = (
    "I checked the records: the order shipped as expected and the carrier confirmed the handover.",
    "The part is available; I can reserve one for the replacement if you want.",
    "The logs show a problem on the carrier side; I would contact them before refunding.",
    "The return is open and the label has been sent to the customer.",
    "Nothing was charged twice; the second line is a pre-authorisation that will be released.",
    "The ticket thread shows we promised a replacement within a week.",
)


class _Writer:
    def __init__(self, rng: random.Random, tokens_per_turn: int) -> None:
        self.rng = rng
        self.tokens_per_turn = tokens_per_turn
        self.planted: set[str] = set()
        self.messages: list[Message] = [{"role": "system", "content": SYSTEM}]
        self.facts: list[Fact] = []
        self.turn = 0

    # -- the conversation ---------------------------------------------------------------------

    def conversation(self, turns: int, seed: int) -> Conversation:
        rng = self.rng
        requests: list[int] = []
        users: list[int] = []
        sigma = 0.5
        for turn in range(turns):
            self.turn = turn
            users.append(len(self.messages))
            self.messages.append({"role": "user", "content": self._user_text()})
            requests.append(len(self.messages))
            # The turn's tool output, log-normal around the mean growth (mean 1 after the shift).
            scale = math.exp(rng.gauss(-sigma * sigma / 2, sigma))
            rounds = rng.choices((1, 2, 3), weights=(4, 4, 2))[0]
            calls_per_round = [rng.choices((1, 2, 3), weights=(6, 3, 1))[0] for _ in range(rounds)]
            # Besides the results, a turn costs its request, its answer and the calls (~130 tokens).
            result_chars = max(400, int((self.tokens_per_turn * scale - 130 - 45 * rounds) * 4))
            weights = [rng.expovariate(1.0) + 0.25 for _ in range(sum(calls_per_round))]
            sizes = iter(max(300, int(result_chars * w / sum(weights))) for w in weights)
            for step, n_calls in enumerate(calls_per_round):
                calls = [self._call(turn, step, k) for k in range(n_calls)]
                self.messages.append({"role": "assistant", "content": None, "tool_calls": calls})
                for call in calls:
                    index = len(self.messages)
                    name = call["function"]["name"]
                    content = self._result(name, next(sizes), index)
                    self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
                requests.append(len(self.messages))
            self.messages.append({"role": "assistant", "content": self._answer()})
        self._check_planted()
        return Conversation(
            self.messages, tuple(requests), tuple(users), tuple(self.facts), seed, self.tokens_per_turn
        )

    def _user_text(self) -> str:
        ask = self.rng.choice(_USER_ASKS)
        return f"{ask} The customer is {self._customer()}." if self.rng.random() < 0.5 else ask

    def _answer(self) -> str:
        rng = self.rng
        return " ".join(rng.sample(_ANSWERS, rng.randint(1, 3)))

    def _call(self, turn: int, step: int, k: int) -> dict[str, Any]:
        rng = self.rng
        name = rng.choices(TOOLS, weights=(4, 3, 2, 2))[0]
        arguments: dict[str, Any]
        if name == "get_order":
            arguments = {"customer": self._customer(), "latest": rng.random() < 0.7}
        elif name == "search_parts":
            arguments = {"query": rng.choice(_PART_NAMES), "limit": rng.choice((20, 50, 100))}
        elif name == "read_logs":
            arguments = {"service": rng.choice(_SERVICES), "since": self._filler_time()}
        else:
            arguments = {"customer": self._customer()}
        call_id = f"call_{turn}_{step}_{k}_{rng.getrandbits(24):06x}"
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }

    # -- filler values ------------------------------------------------------------------------

    def _customer(self) -> str:
        return f"{self.rng.choice(_WORDS)}.{self.rng.choice(_WORDS)}{self.rng.randint(1, 99)}@example.com"

    def _filler_sku(self) -> str:
        return f"{self.rng.choice(_FILLER_SKU)}-{self.rng.randint(1000, 9999)}"

    def _filler_date(self) -> str:
        return f"{self.rng.choice((2023, 2024))}-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d}"

    def _filler_time(self) -> str:
        rng = self.rng
        return f"{self._filler_date()}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"

    def _filler_number(self) -> int:
        return self.rng.randint(100, 99999)

    def _prose(self, words: int) -> str:
        rng = self.rng
        out: list[str] = []
        for i in range(words):
            word = rng.choice(_WORDS)
            out.append(word.capitalize() if i == 0 or out[-1].endswith(".") else word)
            if rng.random() < 0.12:
                out[-1] += "."
        return " ".join(out) + "."

    # -- planted values -----------------------------------------------------------------------

    def _unique(self, make: Callable[[], str]) -> str:
        while (value := make()) in self.planted:
            pass
        self.planted.add(value)
        return value

    def _plant(self, kind: str) -> str:
        rng = self.rng
        if kind == "order":
            return self._unique(lambda: str(rng.randint(9_100_000, 9_999_999)))
        if kind == "part":
            return self._unique(lambda: f"BW-{rng.randint(1000, 9999)}")
        if kind == "id":
            return self._unique(
                lambda: rng.choice(
                    (
                        f"RMA-{rng.randint(10000, 99999)}",
                        f"TCK-{rng.randint(100000, 999999)}",
                        f"cust_{rng.getrandbits(32):08x}",
                    )
                )
            )
        if kind == "amount":
            return self._unique(lambda: f"${rng.randint(12, 1999)}.{rng.choice((0, 50, 99, 95, 49, 25)):02d}")
        if kind == "date":
            return self._unique(lambda: f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
        return self._unique(
            lambda: (
                f"{rng.choice(('label purchase', 'payment capture', 'stock reservation', 'webhook delivery'))}"
                f" failed: {rng.choice(('upstream timeout', 'card declined', 'quota exceeded', 'bad gateway'))}"
                f" (code E{rng.randint(1000, 9999)})"
            )
        )

    def _facts_for(self, index: int) -> list[tuple[str, str, str]]:
        """The facts to plant in the result at `index`: (kind, value, where), one to three."""
        rng = self.rng
        kinds = rng.sample(FACT_KINDS, rng.choices((1, 2, 3), weights=(3, 4, 3))[0])
        planted = [(kind, self._plant(kind), rng.choice(POSITIONS)) for kind in kinds]
        for kind, value, where in planted:
            self.facts.append(Fact(kind, value, index, where, self.turn))
        return planted

    def _check_planted(self) -> None:
        """Each planted value occurs once in the whole conversation, in the message it was planted in."""
        texts = [m["content"] if isinstance(m["content"], str) else "" for m in self.messages]
        calls = [json.dumps(m.get("tool_calls")) for m in self.messages]
        whole = "\x00".join(texts + calls)
        for fact in self.facts:
            if whole.count(fact.value) != 1 or texts[fact.message].count(fact.value) != 1:
                raise AssertionError(f"planted value {fact.value!r} is not unique")

    # -- tool results -------------------------------------------------------------------------

    def _result(self, tool: str, chars: int, index: int) -> str:
        planted = self._facts_for(index)
        if tool == "get_order":
            return self._order(chars, planted)
        if tool == "search_parts":
            return self._parts(chars, planted)
        if tool == "read_logs":
            return self._logs(chars, planted)
        return self._ticket(chars, planted)

    def _layout(self) -> tuple[int | None, float]:
        """About a third of the JSON results come indented, as many APIs return them."""
        return (2, 1.6) if self.rng.random() < 0.35 else (None, 1.0)

    def _fill(self, make: Callable[[], Any], chars: int, indent_factor: float = 1.0) -> list[Any]:
        items: list[Any] = []
        used = 0
        while used < chars or not items:
            item = make()
            items.append(item)
            used += int(len(json.dumps(item)) * indent_factor) + 2
        return items

    def _order(self, chars: int, planted: list[tuple[str, str, str]]) -> str:
        rng = self.rng
        keys = {
            "order": "order_id",
            "part": "replacement_sku",
            "id": "reference",
            "amount": "total",
            "date": "delivered_on",
            "error": "last_error",
        }
        record_keys = {
            "order": "order_id",
            "part": "sku",
            "id": "ref",
            "amount": "unit_price",
            "date": "eta",
            "error": "error",
        }
        head: dict[str, Any] = {
            "order_id": self._filler_number(),
            "status": rng.choice(_STATUSES),
            "placed_at": self._filler_time(),
            "customer": {"email": self._customer(), "segment": rng.choice(("retail", "pro", "club"))},
        }
        tail: dict[str, Any] = {
            "carrier": rng.choice(_CARRIERS),
            "tracking": f"TRK-{''.join(rng.choices('ABCDEFGHJKLMNPQRSTUVWXYZ', k=6))}",
            "invoice": {"issued": self._filler_date(), "vat_rate": 21, "currency": "EUR"},
        }

        def line() -> dict[str, Any]:
            return {
                "sku": self._filler_sku(),
                "name": rng.choice(_PART_NAMES),
                "qty": rng.randint(1, 4),
                "unit_price": round(rng.uniform(3, 600), 2),
                "warehouse": f"W{rng.randint(1, 9)}",
            }

        def event() -> dict[str, Any]:
            return {
                "at": self._filler_time(),
                "event": rng.choice(_EVENTS),
                "by": f"agent-{rng.randint(1, 60)}",
            }

        indent, factor = self._layout()
        lines = self._fill(line, int(chars * 0.6) - 260, factor)
        events = self._fill(event, int(chars * 0.4) - 60, factor)
        for kind, value, where in planted:
            if where == "head":
                head[keys[kind]] = value
            elif where == "tail":
                tail[keys[kind]] = value
            else:
                lines[len(lines) // 2][record_keys[kind]] = value
        return json.dumps({**head, "lines": lines, "events": events, **tail}, indent=indent)

    def _parts(self, chars: int, planted: list[tuple[str, str, str]]) -> str:
        rng = self.rng
        keys = {
            "order": "backorder",
            "part": "sku",
            "id": "listing",
            "amount": "price",
            "date": "restock",
            "error": "sync_error",
        }

        def part() -> dict[str, Any]:
            return {
                "sku": self._filler_sku(),
                "name": rng.choice(_PART_NAMES),
                "price": round(rng.uniform(3, 600), 2),
                "stock": rng.randint(0, 80),
                "warehouse": f"W{rng.randint(1, 9)}",
                "updated": self._filler_date(),
            }

        indent, factor = self._layout()
        matches = self._fill(part, chars - 60, factor)
        spots = {"head": 0, "middle": len(matches) // 2, "tail": len(matches) - 1}
        for kind, value, where in planted:
            matches[spots[where]][keys[kind]] = value
        summary = {"query_ms": rng.randint(3, 900), "count": len(matches)}
        return json.dumps({**summary, "matches": matches}, indent=indent)

    def _logs(self, chars: int, planted: list[tuple[str, str, str]]) -> str:
        rng = self.rng
        lines: list[str] = []
        used = 0
        while used < chars or not lines:
            verb = rng.choice(_LOG_VERBS).format(
                n=self._filler_number(),
                ms=rng.randint(1, 4000),
                k=rng.randint(1, 500),
                w=rng.randint(1, 9),
                p=rng.randint(1, 99),
                q=rng.randint(0, 300),
                d=self._filler_date(),
            )
            level = "WARN" if "slow" in verb or "rate" in verb else "INFO"
            lines.append(
                f"{self._filler_time()} {level:<5} {rng.choice(_SERVICES)}[{rng.randint(1, 9)}]: {verb}"
            )
            used += len(lines[-1]) + 1
        spots = {"head": 1, "middle": len(lines) // 2, "tail": len(lines)}
        for kind, value, where in sorted(planted, key=lambda p: -spots[p[2]]):
            text = {
                "order": f"order {value} moved to state packed",
                "part": f"reserved 1 x {value} for replacement",
                "id": f"created {value} for customer request",
                "amount": f"refund of {value} queued for settlement",
                "date": f"carrier promised delivery on {value}",
                "error": value,
            }[kind]
            level = "ERROR" if kind == "error" else "INFO"
            lines.insert(
                min(spots[where], len(lines)),
                f"{self._filler_time()} {level:<5} {rng.choice(_SERVICES)}[1]: {text}",
            )
        return "\n".join(lines)

    def _ticket(self, chars: int, planted: list[tuple[str, str, str]]) -> str:
        rng = self.rng
        paragraphs: list[str] = []
        used = 0
        while used < chars or not paragraphs:
            who = rng.choice(("Customer", "Agent", "Warehouse"))
            paragraphs.append(f"[{self._filler_time()}] {who}: {self._prose(rng.randint(25, 90))}")
            used += len(paragraphs[-1]) + 2
        spots = {"head": 0, "middle": len(paragraphs) // 2, "tail": len(paragraphs) - 1}
        for kind, value, where in planted:
            sentence = {
                "order": f"This is about order {value}.",
                "part": f"We will send part {value} as the replacement.",
                "id": f"Your reference is {value}.",
                "amount": f"The refund will be {value}.",
                "date": f"It should arrive by {value}.",
                "error": f"Our system reported: {value}.",
            }[kind]
            paragraphs[spots[where]] += " " + sentence
        return "Ticket thread\n\n" + "\n\n".join(paragraphs)


def main(argv: list[str]) -> None:
    from proxy.counting.tokens import RequestCounter, count_chars4

    turns = int(argv[0]) if argv else 200
    conversation = simulate(turns)
    count = RequestCounter(count_chars4).message
    tokens = sum(count(m) for m in conversation.messages)
    tools = sum(1 for m in conversation.messages if m["role"] == "tool")
    print(
        f"{turns} turns, {len(conversation.messages)} messages ({tools} tool results), "
        f"{len(conversation.requests)} model calls, {tokens:,} tokens ({tokens / turns:,.0f} a turn), "
        f"{len(conversation.facts)} planted facts"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
