from __future__ import annotations

from proto_registry import Registry


def order_placed(registry: Registry) -> bytes:
    cls = registry.message_class("shop.orders.v1.OrderPlaced")
    m = cls(order_id="o-1001", customer_id="c-42", channel=2)
    item = m.items.add(sku="SKU-RED-M", title="red shirt", quantity=2)
    item.unit_price.currency_code = "EUR"
    item.unit_price.units = 19
    m.total.currency_code = "EUR"
    m.total.units = 38
    m.shipping_address.city = "Lyon"
    m.placed_at.seconds = 1_714_000_000
    m.metadata["source"] = "web"
    return m.SerializeToString()


def order_cancelled(registry: Registry) -> bytes:
    cls = registry.message_class("shop.orders.v1.OrderCancelled")
    return cls(order_id="o-1001", customer_id="c-42", reason=3, note="out of stock").SerializeToString()
