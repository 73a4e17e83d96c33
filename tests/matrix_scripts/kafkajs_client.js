// The matrix with KafkaJS (see common.py; KafkaJS compresses with gzip only unless a codec
// package is registered): produces, consumes in a group, commits explicitly, reads the
// committed offsets back and lists offsets; prints the same JSON line as the Python scripts.
const { Kafka, logLevel, CompressionTypes } = require('kafkajs')
const s = JSON.parse(process.argv[2])
const PARTITIONS = 2
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const kafka = new Kafka({ clientId: 'kjs-matrix', brokers: s.bootstrap.split(','), logLevel: logLevel.WARN })
const CODECS = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }

function record (codec, i) {
  return { key: 'k' + i, value: (codec + '-value-' + i + '-').repeat(6), timestamp: String(s.t0 + i), partition: i % PARTITIONS }
}

function byTopic (rows, pick) {
  const out = {}
  for (const [topic, list] of rows) {
    out[topic] = {}
    for (const p of list) out[topic][String(p.partition)] = pick(p)
  }
  return out
}

async function main () {
  const topics = Object.values(s.topics)
  const producer = kafka.producer(); await producer.connect()
  const produced = {}
  for (const [codec, topic] of Object.entries(s.topics)) {
    produced[codec] = []
    for (let b = 0; b < s.n; b += 50) {  // several requests, so several batches per partition
      const messages = []
      for (let i = b; i < Math.min(b + 50, s.n); i++) messages.push(record(codec, i))
      const meta = await producer.send({ topic, messages, compression: CODECS[codec] })
      const base = {}
      for (const m of meta) base[m.partition] = Number(m.baseOffset)
      for (const m of messages) produced[codec].push([m.partition, base[m.partition]++])
    }
  }
  await producer.disconnect()
  const consumer = kafka.consumer({ groupId: s.group }); await consumer.connect()
  await consumer.subscribe({ topics, fromBeginning: true })
  const consumed = []
  const next = {}
  await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('timeout, consumed ' + consumed.length)), 90000)
    consumer.run({
      autoCommit: false,
      eachMessage: async ({ topic, partition, message }) => {
        consumed.push([topic, partition, Number(message.offset), message.key.toString(), message.value.toString()])
        next[topic + ':' + partition] = { topic, partition, offset: String(Number(message.offset) + 1) }
        if (consumed.length === s.n * topics.length) { clearTimeout(t); resolve() }
      }
    }).catch(reject)
  })
  await consumer.commitOffsets(Object.values(next))
  await consumer.disconnect()
  const admin = kafka.admin(); await admin.connect()
  const committed = byTopic((await admin.fetchOffsets({ groupId: s.group, topics })).map(t => [t.topic, t.partitions]),
    p => Number(p.offset))
  const listed = []
  const byTime = []
  const target = s.t0 + Math.floor(s.n / 2)
  for (const topic of topics) {
    listed.push([topic, await admin.fetchTopicOffsets(topic)])
    byTime.push([topic, await admin.fetchTopicOffsetsByTimestamp(topic, target)])
  }
  await admin.disconnect()
  console.log(JSON.stringify({
    client: 'kafkajs',
    version: require('kafkajs/package.json').version,
    produced,
    consumed,
    committed,
    earliest: byTopic(listed, p => Number(p.low)),
    latest: byTopic(listed, p => Number(p.high)),
    by_time: byTopic(byTime, p => Number(p.offset)),
    by_time_target: target
  }))
}
main().catch(e => { console.error('FAILED', e); process.exit(1) })
