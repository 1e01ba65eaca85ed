#!/usr/bin/env node
// KafkaJS producing and consuming across a failover between `kfs serve` daemons,
// driven by tests/cluster/test_clients_failover.py.
//
//   node failover.js BOOTSTRAP TOPIC GROUP
//
// One idempotent producer and one group consumer (from the beginning) live as
// long as the process.  Commands on stdin, one per line:
//   produce PREFIX COUNT   sends COUNT records round robin over the topic's
//                          partitions, one send each (acks -1), and emits
//                          {"event":"produced","partition","offset","value"} per
//                          record, then {"event":"done"}
//   stop                   disconnects both, emits {"event":"stopped"}, exits
// The consumer emits {"event":"record","partition","offset","value"} per record.
// A failed send emits {"event":"error","error"} and exits 1.
'use strict'

const readline = require('readline')
const { consumerSettings, emit, emitRecord, kafkaClient, partitionCount } = require('./common')

const [bootstrap, topic, groupId] = process.argv.slice(2)
if (!bootstrap || !topic || !groupId) {
  process.stderr.write('usage: failover.js BOOTSTRAP TOPIC GROUP\n')
  process.exit(2)
}

// Retries that outlast a failover: the session timeout, then the client's own
// metadata refresh and reconnect.
const retry = { retries: 12, initialRetryTime: 100, maxRetryTime: 2000 }
const kafka = kafkaClient({
  bootstrap,
  clientId: 'kfs-kafkajs-failover',
  connectionTimeout: 3000,
  requestTimeout: 10000,
  retry,
})

const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, retry })
const consumer = kafka.consumer({ ...consumerSettings(groupId, retry), metadataMaxAge: 1000 })

async function produce(prefix, count, partitions) {
  for (let i = 0; i < count; i++) {
    const value = `${prefix}${i}`
    const partition = i % partitions
    const [result] = await producer.send({ topic, acks: -1, messages: [{ value, partition }] })
    emit({ event: 'produced', partition, offset: Number(result.baseOffset), value })
  }
  emit({ event: 'done' })
}

async function stop(code) {
  await Promise.allSettled([producer.disconnect(), consumer.disconnect()])
  emit({ event: 'stopped' })
  process.exit(code)
}

async function main() {
  const partitions = await partitionCount(kafka, topic)
  await producer.connect()
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ partition, message }) => emitRecord(partition, message),
  })
  emit({ event: 'ready' })
  // Commands run one after another, in the order they came.
  let queue = Promise.resolve()
  const lines = readline.createInterface({ input: process.stdin })
  lines.on('line', (line) => {
    const [command, ...args] = line.trim().split(/\s+/)
    queue = queue.then(async () => {
      if (command === 'produce') {
        await produce(args[0], Number(args[1]), partitions)
      } else if (command === 'stop') {
        await stop(0)
      }
    }).catch(async (error) => {
      emit({ event: 'error', error: String(error.stack || error) })
      await stop(1)
    })
  })
  lines.on('close', () => {
    queue = queue.then(() => stop(0))
  })
}

main().catch((error) => {
  process.stderr.write(`failed: ${error.stack || error}\n`)
  process.exit(1)
})
