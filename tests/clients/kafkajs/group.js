#!/usr/bin/env node
// KafkaJS against `kfs serve`, driven by tests/server/test_groups_kafkajs.py.
//
//   node group.js BOOTSTRAP TOPIC GROUP create PARTITIONS
//   node group.js BOOTSTRAP TOPIC GROUP produce COUNT PREFIX
//   node group.js BOOTSTRAP TOPIC GROUP consume
//
// Every line on stdout is one JSON object with an "event":
//   create:  {"event":"created","topic","partitions","created"}
//   produce: {"event":"produced","partition","offset","value"} per record, then {"event":"done"}
//   consume: {"event":"joined","member","leader","partitions":[...]} after each group join/sync,
//            {"event":"record","partition","offset","value"} per consumed record,
//            {"event":"committed","generation","offsets":{partition: offset}} per offset commit,
//            {"event":"stopped"} once disconnected (committed, left the group).
// A consumer runs until it reads "stop" on stdin, stdin closes, or SIGTERM/SIGINT.
// KafkaJS's own log goes to stderr (warnings and errors only).
'use strict'

const { Partitioners } = require('kafkajs')
const {
  consumerSettings,
  emit,
  emitRecord,
  kafkaClient,
  partitionCount: countPartitions,
} = require('./common')

const [bootstrap, topic, groupId, mode, ...rest] = process.argv.slice(2)
if (!bootstrap || !topic || !groupId || !mode) {
  process.stderr.write('usage: group.js BOOTSTRAP TOPIC GROUP create|produce|consume [ARGS]\n')
  process.exit(2)
}

const kafka = kafkaClient({
  bootstrap,
  clientId: `kfs-kafkajs-${mode}`,
  connectionTimeout: 5000,
  requestTimeout: 30000,
  retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 2000 },
})

async function create(partitions) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    const created = await admin.createTopics({
      waitForLeaders: true,
      topics: [{ topic, numPartitions: partitions, replicationFactor: 1 }],
    })
    emit({ event: 'created', topic, partitions, created })
  } finally {
    await admin.disconnect()
  }
}

async function produce(count, prefix) {
  const producer = kafka.producer({ createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  try {
    const partitions = await partitionCount()
    const messages = []
    for (let i = 0; i < count; i++) {
      messages.push({ key: `key-${i}`, value: `${prefix}${i}`, partition: i % partitions })
    }
    // One send: one batch per partition, its records at baseOffset, baseOffset + 1, ...
    const results = await producer.send({ topic, messages, acks: -1 })
    const base = Object.fromEntries(results.map((r) => [r.partition, Number(r.baseOffset)]))
    const next = {}
    for (const { partition, value } of messages) {
      next[partition] = (next[partition] ?? 0) + 1
      emit({ event: 'produced', partition, offset: base[partition] + next[partition] - 1, value })
    }
    emit({ event: 'done' })
  } finally {
    await producer.disconnect()
  }
}

const partitionCount = () => countPartitions(kafka, topic)

async function consume() {
  const consumer = kafka.consumer(
    consumerSettings(groupId, { retries: 8, initialRetryTime: 100, maxRetryTime: 2000 })
  )
  const { GROUP_JOIN, COMMIT_OFFSETS, CRASH } = consumer.events
  consumer.on(GROUP_JOIN, ({ payload }) => {
    emit({
      event: 'joined',
      member: payload.memberId,
      leader: payload.isLeader,
      partitions: [...(payload.memberAssignment[topic] ?? [])].sort((a, b) => a - b),
    })
  })
  consumer.on(COMMIT_OFFSETS, ({ payload }) => {
    const offsets = {}
    for (const t of payload.topics) {
      if (t.topic !== topic) continue
      for (const { partition, offset } of t.partitions) offsets[partition] = Number(offset)
    }
    emit({ event: 'committed', generation: payload.groupGenerationId, offsets })
  })
  consumer.on(CRASH, ({ payload }) => {
    emit({ event: 'crash', error: String(payload.error), restart: payload.restart })
  })

  let stopping = null
  const stop = () => {
    if (!stopping) {
      stopping = consumer.disconnect().then(
        () => {
          emit({ event: 'stopped' })
          process.exit(0)
        },
        (error) => {
          process.stderr.write(`disconnect failed: ${error.stack || error}\n`)
          process.exit(1)
        }
      )
    }
    return stopping
  }
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
  process.stdin.setEncoding('utf8')
  let input = ''
  process.stdin.on('data', (chunk) => {
    input += chunk
    if (input.split('\n').some((line) => line.trim() === 'stop')) stop()
  })
  process.stdin.on('end', stop)

  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ partition, message }) => emitRecord(partition, message),
  })
}

async function main() {
  if (mode === 'create') return create(Number(rest[0] ?? 3))
  if (mode === 'produce') return produce(Number(rest[0]), rest[1] ?? 'value-')
  if (mode === 'consume') return consume()
  throw new Error(`unknown mode ${mode}`)
}

main().then(
  () => {
    if (mode !== 'consume') process.exit(0)
  },
  (error) => {
    process.stderr.write(`failed: ${error.stack || error}\n`)
    process.exit(1)
  }
)
