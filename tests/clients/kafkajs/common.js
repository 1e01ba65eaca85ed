// What group.js and failover.js share: JSON lines on stdout, a KafkaJS client
// whose own log goes to stderr, and the topic's partition count.
'use strict'

const { Kafka, logLevel } = require('kafkajs')

const emit = (event) => process.stdout.write(JSON.stringify(event) + '\n')

// A consumed record as the Python side reads it.
const emitRecord = (partition, message) =>
  emit({
    event: 'record',
    partition,
    offset: Number(message.offset),
    value: message.value === null ? null : message.value.toString(),
  })

function kafkaClient({ bootstrap, clientId, connectionTimeout, requestTimeout, retry }) {
  return new Kafka({
    clientId,
    brokers: bootstrap.split(','),
    connectionTimeout,
    requestTimeout,
    retry,
    logLevel: logLevel.WARN,
    logCreator: () => ({ namespace, label, log }) => {
      const { message, timestamp, logger, ...extra } = log
      process.stderr.write(`${timestamp} [${label}] ${namespace}: ${message} ${JSON.stringify(extra)}\n`)
    },
  })
}

async function partitionCount(kafka, topic) {
  const admin = kafka.admin()
  await admin.connect()
  try {
    const { topics } = await admin.fetchTopicMetadata({ topics: [topic] })
    return topics[0].partitions.length
  } finally {
    await admin.disconnect()
  }
}

// A group consumer's settings, quick to notice a member or a daemon gone.
const consumerSettings = (groupId, retry) => ({
  groupId,
  sessionTimeout: 6000, // the daemon's minimum
  rebalanceTimeout: 20000,
  heartbeatInterval: 500,
  maxWaitTimeInMs: 250,
  retry,
})

module.exports = { consumerSettings, emit, emitRecord, kafkaClient, partitionCount }
