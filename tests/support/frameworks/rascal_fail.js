// A rascal subscriber whose handler always fails: republish twice (lib/amqp/SubscriberError.js
// `republish`), then forward to the dead-letter queue (`forward`). Args: URL PREFIX N [fixed].
// With `fixed` the handler succeeds; with N=0 nothing is published (a subscriber for replayed messages).
// Env FRAMEWORK_TEST_LOG: a file each handler call appends "attempt CONTENT" (or "processed CONTENT EXCHANGE
// ROUTING_KEY") to.
const fs = require('fs');
const Rascal = require('rascal');

const [url, prefix, n, mode] = process.argv.slice(2);
const fixed = mode === 'fixed';
const log = (line) => { if (process.env.FRAMEWORK_TEST_LOG) fs.appendFileSync(process.env.FRAMEWORK_TEST_LOG, `${line}\n`); };
const vhost = new URL(url).pathname.slice(1) ? decodeURIComponent(new URL(url).pathname.slice(1)) : '/';
const ex = `${prefix}.ex`, work = `${prefix}.work`, dlq = `${prefix}.dlq`;
const config = {
  vhosts: {
    [vhost]: {
      connection: { url },
      exchanges: { [ex]: { type: 'topic' } },
      queues: [work, dlq],
      bindings: [`${ex}[order.created] -> ${work}`],
      publications: { orders: { exchange: ex, routingKey: 'order.created' }, dead: { queue: dlq } },
      subscriptions: { work: { queue: work, prefetch: 1 } },
    },
  },
};

(async () => {
  const broker = await Rascal.BrokerAsPromised.create(Rascal.withDefaultConfig(config));
  broker.on('error', (err) => console.error('broker error', err.message));
  const sub = await broker.subscribe('work');
  sub.on('message', (message, content, ackOrNack) => {
    if (fixed) {
      // the exchange and routing key as rascal restores them from its headers (restoreRoutingHeaders)
      log(`processed ${content.toString()} ${message.fields.exchange} ${message.fields.routingKey}`);
      return ackOrNack();
    }
    log(`attempt ${content.toString()}`);
    const err = new Error(`bad payload ${content.toString()}`);
    err.code = 'E_BAD';
    ackOrNack(err, [{ strategy: 'republish', attempts: 2 }, { strategy: 'forward', publication: 'dead' }]);
  });
  sub.on('error', (err) => console.error('subscription error', err.message));
  for (let i = 0; i < Number(n); i++) await broker.publish('orders', `order ${i}`);
  setTimeout(async () => { await broker.shutdown(); process.exit(0); }, 120000);
})().catch((err) => { console.error(err); process.exit(2); });
