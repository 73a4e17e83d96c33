// Produces 2,000 keyed records with headers (idempotent, gzip), consumes them in a group,
// describes the group and deletes the topic; prints a JSON summary for the Python test.
const { Kafka, logLevel, CompressionTypes } = require('kafkajs')
const broker = process.argv[2]
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'
const kafka = new Kafka({ clientId: 'kjs', brokers: [broker], logLevel: logLevel.WARN })
async function main() {
  const admin = kafka.admin(); await admin.connect()
  await admin.createTopics({ topics: [{ topic: 'kjs', numPartitions: 2 }] })
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 }); await producer.connect()
  const N = 2000
  for (let b = 0; b < N / 100; b++) {
    const messages = []
    for (let i = b * 100; i < (b + 1) * 100; i++) messages.push({ key: 'k' + i, value: 'v' + i, headers: { seq: String(i) } })
    await producer.send({ topic: 'kjs', messages, compression: CompressionTypes.GZIP })
  }
  await producer.disconnect()
  const offs = await admin.fetchTopicOffsets('kjs')
  const consumer = kafka.consumer({ groupId: 'kjs-group' }); await consumer.connect()
  await consumer.subscribe({ topic: 'kjs', fromBeginning: true })
  const seen = new Set()
  await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('timeout, seen ' + seen.size)), 60000)
    consumer.run({ eachMessage: async ({ message }) => {
      if (message.value.toString() !== 'v' + message.headers.seq.toString()) reject(new Error('mismatch'))
      seen.add(message.headers.seq.toString()); if (seen.size === N) { clearTimeout(t); resolve() } } })
  })
  await consumer.disconnect()
  const groups = await admin.describeGroups(['kjs-group'])
  await admin.deleteTopics({ topics: ['kjs'] })
  await admin.disconnect()
  console.log(JSON.stringify({ consumed: seen.size, offsets: offs.map(o => [o.partition, o.high]).sort(), group: groups.groups[0].state }))
}
main().catch(e => { console.error('FAILED', e); process.exit(1) })
