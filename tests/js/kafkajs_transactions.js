// KafkaJS transactions against the broker; prints one JSON line for the Python test.
//   node kafkajs_transactions.js produce BROKERS (host:port[,host:port...])
//     A transactional producer (transactionalId, idempotent, maxInFlightRequests 1) runs six
//     transactions of 20 records over `kjs-tx` partitions 0 and 1: 1 and 4 abort, the others
//     commit; 2 (committed) and 4 (aborted) also send offsets of `kjs-tx-in` for group `kjs-tx-group`.
//     Then a second producer with the same transactionalId fences the first one mid-transaction
//     and commits a transaction of its own.
//   node kafkajs_transactions.js consume BROKER TOPIC PARTITIONS
//     A read_committed consumer (readUncommitted: false) in group `kjs-rc` reads TOPIC from the
//     beginning until every partition has delivered its record `end`; prints the values per partition.
const { Kafka, logLevel } = require('kafkajs')
const [mode, broker] = process.argv.slice(2, 4)
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const kafka = new Kafka({ clientId: 'kjs-tx', brokers: broker.split(','), logLevel: logLevel.WARN })
const TOPIC = 'kjs-tx', IN = 'kjs-tx-in', GROUP = 'kjs-tx-group'

async function produce() {
  const admin = kafka.admin(); await admin.connect()
  await admin.createTopics({ topics: [{ topic: TOPIC, numPartitions: 2 }, { topic: IN, numPartitions: 1 }] })
  await admin.disconnect()
  const producer = kafka.producer({ transactionalId: 'kjs-txn', idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const committed = [], aborted = [], offsets = {}
  for (let t = 0; t < 6; t++) {
    const abort = t === 1 || t === 4
    const txn = await producer.transaction()
    const values = []
    for (let half = 0; half < 2; half++) {  // two sends per transaction, both partitions in each
      const messages = []
      for (let i = half * 10; i < half * 10 + 10; i++) {
        const value = `t${t}-${String(i).padStart(2, '0')}`
        messages.push({ partition: i % 2, key: value, value }); values.push([i % 2, value])
      }
      await txn.send({ topic: TOPIC, messages })
    }
    if (t === 2 || t === 4) {
      const offset = String(100 + t); offsets[t] = offset
      await txn.sendOffsets({ consumerGroupId: GROUP, topics: [{ topic: IN, partitions: [{ partition: 0, offset }] }] })
    }
    if (abort) { await txn.abort(); aborted.push(...values) } else { await txn.commit(); committed.push(...values) }
  }
  // A zombie: a second producer with the same transactionalId begins (InitProducerId aborts the
  // first one's open transaction and bumps the epoch); the first one's commit is refused.
  const zombie = await producer.transaction()
  const zombieValues = [0, 1].map(partition => [partition, `zombie-${partition}`])
  await zombie.send({ topic: TOPIC, messages: zombieValues.map(([partition, value]) => ({ partition, value })) })
  const successor = kafka.producer({ transactionalId: 'kjs-txn', idempotent: true, maxInFlightRequests: 1 })
  await successor.connect()
  const txn = await successor.transaction()  // its InitProducerId (connect's is not transactional)
  let fenced = null
  try { await zombie.commit() } catch (e) { fenced = e.type || e.name }
  await producer.disconnect()
  const values = [0, 1].map(partition => [partition, `after-${partition}`])
  await txn.send({ topic: TOPIC, messages: values.map(([partition, value]) => ({ partition, value })) })
  await txn.commit(); committed.push(...values)
  await successor.disconnect()
  return { committed, aborted, offsets, fenced, zombie: zombieValues }
}

async function consume(topic, partitions) {
  const consumer = kafka.consumer({ groupId: 'kjs-rc', readUncommitted: false, maxWaitTimeInMs: 200 })
  await consumer.connect()
  await consumer.subscribe({ topic, fromBeginning: true })
  const values = Array.from({ length: partitions }, () => [])
  const done = new Set()
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timeout: ' + JSON.stringify(values))), 60000)
    consumer.run({ eachMessage: async ({ partition, message }) => {
      const value = message.value.toString()
      values[partition].push(value)
      if (value === 'end') done.add(partition)
      if (done.size === partitions) { clearTimeout(timer); resolve() }
    } }).catch(reject)
  })
  await consumer.disconnect()
  return { values }
}

const run = mode === 'produce' ? produce() : consume(process.argv[4], Number(process.argv[5]))
run.then(out => console.log(JSON.stringify(out))).catch(e => { console.error('FAILED', e); process.exit(1) })
