"""Failure fingerprints (dlxtool.failures): error texts that differ only in ids, numbers, UUIDs, hex or timestamps are
one failure; a recorded stack is its exception type and first application frame (pure logic)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dlxtool.failures import FailureKey, StackSignature, error_pattern, failure_key, stack_signature


@pytest.mark.parametrize(("a", "b", "pattern"), [
    ("ValueError: order o-00013 has no lines", "ValueError: order o-00058 has no lines",
     "ValueError: order o-<n> has no lines"),
    ("KeyError: sku-3bb292a1 not in stock", "KeyError: sku-106db5e1 not in stock", "KeyError: sku-<id> not in stock"),
    ("request 3f9a1c2b-8d7e-4f50-9a1c-2b8d7e6f5000 failed", "request 00000000-0000-4000-8000-00000000abcd failed",
     "request <uuid> failed"),
    ("deadline passed at 2026-12-01T22:30:21.669Z", "deadline passed at 2027-01-31T03:04:05Z",
     "deadline passed at <time>"),
    ("at 2026-12-01 22:30:21,669 UTC: boom", "at 2026-01-02 01:02:03,004 UTC: boom", "at <time>: boom"),
    ("handler took 22:30:21.669 to fail", "handler took 9:05 to fail", "handler took <time> to fail"),
    ("null pointer at 0x7ffde3a0", "null pointer at 0xDEAD", "null pointer at <hex>"),
    ("no such user user42 (ord_8f3Zq1xY)", "no such user user7731 (ord_Q2x9aa01)", "no such user <id> (ord_<id>)"),
    ("digest 5d41402abc4b2a76b9719d911017c592 mismatch", "digest aaaaaaaaaaaabbbbbbbbbbbbcccccccc mismatch",
     "digest <id> mismatch"),
    ("timeout after 30s talking to 10.0.3.7:5432", "timeout after 5s talking to 10.0.3.12:5433",
     "timeout after <n>s talking to <n>.<n>.<n>.<n>:<n>"),
    ("amount   -12.50\tis negative", "amount -3.00 is negative", "amount -<n>.<n> is negative"),
])
def test_texts_that_differ_only_in_what_varies_have_one_pattern(a: str, b: str, pattern: str) -> None:
    assert error_pattern(a) == error_pattern(b) == pattern


@pytest.mark.parametrize(("a", "b"), [
    ("ValueError: order has no lines", "ValueError: order has no customer"),
    ("KeyError: 'price'", "KeyError: 'currency'"),  # words are what the failure is: never folded
    ("IllegalStateException: closed", "IllegalArgumentException: closed"),
    ("HTTP 503 Service Unavailable", "HTTP 404 Not Found"),
])
def test_texts_that_say_different_things_keep_apart(a: str, b: str) -> None:
    assert error_pattern(a) != error_pattern(b)


@given(st.text(alphabet=st.sampled_from("abc XYZ:-_./()'"), max_size=30), st.integers(0, 10**12),
       st.integers(0, 10**12), st.uuids(), st.uuids())
def test_any_text_with_different_numbers_and_uuids_in_it_has_one_pattern(words: str, n: int, m: int,
                                                                        u: uuid.UUID, v: uuid.UUID) -> None:
    assert error_pattern(f"{words} {n} id={u} {words}") == error_pattern(f"{words} {m} id={v} {words}")


SPRING = """org.springframework.amqp.rabbit.support.ListenerExecutionFailedException: Listener method 'public void \
com.acme.orders.OrderListener.onOrder(com.acme.Order)' threw exception
\tat org.springframework.amqp.rabbit.listener.adapter.MessagingMessageListenerAdapter.invokeHandler(\
MessagingMessageListenerAdapter.java:270)
\tat org.springframework.amqp.rabbit.listener.AbstractMessageListenerContainer.doInvokeListener(\
AbstractMessageListenerContainer.java:1663)
Caused by: java.lang.IllegalStateException: order o-{n} has no lines
\tat com.acme.orders.OrderValidator.validate(OrderValidator.java:{line})
\tat com.acme.orders.OrderListener.onOrder(OrderListener.java:17)
\tat jdk.internal.reflect.GeneratedMethodAccessor1.invoke(Unknown Source)
\t... 12 more"""

DOTNET = """System.InvalidOperationException: handler failed ---> System.FormatException: bad amount 'x12'
   at System.Number.ThrowFormatException(ReadOnlySpan`1 value)
   at Acme.Billing.AmountParser.Parse(String text) in /src/Billing/AmountParser.cs:line 31
   --- End of inner exception stack trace ---
   at Acme.Billing.ChargeHandler.Handle(Charge message, IMessageHandlerContext context) in /src/ChargeHandler.cs:line 20
   at NServiceBus.InvokeHandlerTerminator.Terminate(IInvokeHandlerContext context)"""

PYTHON = """Traceback (most recent call last):
  File "/usr/lib/python3/dist-packages/dramatiq/worker.py", line 480, in process_message
    res = actor(*message.args, **message.kwargs)
  File "/app/shop/tasks.py", line 12, in charge
    amount = parse(text)
  File "/app/shop/money.py", line {line}, in parse
    raise ValueError(f"bad amount {{text}}")
ValueError: bad amount x{n}"""


def test_a_java_stack_is_its_root_cause_and_first_application_frame() -> None:
    """Spring wraps the cause in ListenerExecutionFailedException: the cause counts; Spring's and the JDK's frames are
    not the application's; line numbers are not part of it (a new build moves them)."""
    signature = stack_signature(SPRING.format(n="00013", line=42))
    assert signature == StackSignature("java.lang.IllegalStateException", "com.acme.orders.OrderValidator.validate")
    assert stack_signature(SPRING.format(n="00058", line=44)) == signature
    assert signature.short_frame() == "OrderValidator.validate"


def test_a_dotnet_stack_is_its_innermost_exception_and_first_application_frame() -> None:
    assert stack_signature(DOTNET) == StackSignature("System.FormatException", "Acme.Billing.AmountParser.Parse")
    # MassTransit records the frames alone, and the type in a header of its own
    frames = "\n".join(DOTNET.splitlines()[1:3])
    assert stack_signature(frames, "System.FormatException") == stack_signature(DOTNET)


def test_a_python_traceback_is_its_exception_and_the_application_frame_closest_to_the_raise() -> None:
    signature = stack_signature(PYTHON.format(line=5, n=12))
    assert signature == StackSignature("ValueError", "/app/shop/money.py in parse")
    assert stack_signature(PYTHON.format(line=9, n=99)) == signature
    assert signature.short_frame() == "money.py in parse"
    chained = PYTHON.format(line=5, n=1) + ("\n\nDuring handling of the above exception, another exception occurred:"
                                            "\n\n" + PYTHON.format(line=5, n=1).replace("ValueError", "RuntimeError"))
    assert stack_signature(chained).exception == "RuntimeError"  # type: ignore[union-attr]


def test_a_stack_of_library_frames_only_keeps_its_innermost_frame() -> None:
    only_jdk = "java.io.IOException: closed\n\tat java.io.Stream.read(Stream.java:1)\n\tat java.io.X.y(X.java:2)"
    assert stack_signature(only_jdk) == StackSignature("java.io.IOException", "java.io.Stream.read")


@pytest.mark.parametrize("text", [None, "", "   ", "just some text", "no stack here: sorry"])
def test_text_that_is_no_stack_has_no_signature(text: str | None) -> None:
    assert stack_signature(text) is None


def test_the_key_a_summary_groups_by() -> None:
    a, b = "ValueError: order o-00013 has no lines", "ValueError: order o-00058 has no lines"
    assert failure_key(a) == failure_key(b) == FailureKey("ValueError: order o-<n> has no lines")
    assert failure_key(a, ungrouped=True) != failure_key(b, ungrouped=True)
    assert failure_key(a, ungrouped=True) == FailureKey(a)
    # a stack decides where there is one: two texts, one failure site
    spring = [failure_key(f"order {n} has no lines", SPRING.format(n=n, line=n)) for n in ("1", "2")]
    assert spring[0] == spring[1] and spring[0].pattern is None
    assert spring[0].to_json() == {"error_pattern": None, "exception": "java.lang.IllegalStateException",
                                   "frame": "com.acme.orders.OrderValidator.validate"}
    assert failure_key(None) == FailureKey(None)
