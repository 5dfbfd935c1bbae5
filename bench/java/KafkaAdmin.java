// The benchmark's Kafka admin calls, run as a single-file program (java -cp '<kafka jars>/*'
// KafkaAdmin.java ...) so that no Python Kafka client is needed. bench/kafka_broker.py calls it.
//
//   KafkaAdmin <bootstrap> create <topic>:<partitions> ...  creates the topics (replication 1)
//                                                           and waits until every partition
//                                                           has a leader
//   KafkaAdmin <bootstrap> offsets <topic> ...              latest offsets, summed per topic
//
// Prints one line "RESULT <json>" (log4j's default configuration prints errors only).
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsResult.ListOffsetsResultInfo;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

public class KafkaAdmin {
    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            throw new IllegalArgumentException("usage: KafkaAdmin <bootstrap> create|offsets ...");
        }
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
        List<String> rest = List.of(args).subList(2, args.length);
        try (Admin admin = Admin.create(props)) {
            switch (args[1]) {
                case "create" -> create(admin, rest);
                case "offsets" -> offsets(admin, rest);
                default -> throw new IllegalArgumentException("unknown command " + args[1]);
            }
        }
    }

    static void create(Admin admin, List<String> specs) throws Exception {
        List<NewTopic> topics = new ArrayList<>();
        List<String> names = new ArrayList<>();
        for (String spec : specs) {
            String[] parts = spec.split(":");
            topics.add(new NewTopic(parts[0], Integer.parseInt(parts[1]), (short) 1));
            names.add(parts[0]);
        }
        admin.createTopics(topics).all().get();
        long deadline = System.nanoTime() + 60_000_000_000L;
        while (true) {
            boolean ready = true;
            try {
                for (TopicDescription d : admin.describeTopics(names).allTopicNames().get().values()) {
                    for (TopicPartitionInfo p : d.partitions()) {
                        ready &= p.leader() != null && !p.leader().isEmpty();
                    }
                }
            } catch (java.util.concurrent.ExecutionException e) {
                ready = false; // not in the metadata yet
            }
            if (ready) {
                break;
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("topics without a leader after 60 s: " + names);
            }
            Thread.sleep(100);
        }
        System.out.println("RESULT {\"created\": " + names.size() + "}");
    }

    static void offsets(Admin admin, List<String> names) throws Exception {
        Map<TopicPartition, OffsetSpec> wanted = new HashMap<>();
        for (TopicDescription d : admin.describeTopics(names).allTopicNames().get().values()) {
            for (TopicPartitionInfo p : d.partitions()) {
                wanted.put(new TopicPartition(d.name(), p.partition()), OffsetSpec.latest());
            }
        }
        Map<String, Long> totals = new HashMap<>();
        for (String name : names) {
            totals.put(name, 0L);
        }
        for (Map.Entry<TopicPartition, ListOffsetsResultInfo> e :
                admin.listOffsets(wanted).all().get().entrySet()) {
            totals.merge(e.getKey().topic(), e.getValue().offset(), Long::sum);
        }
        StringBuilder json = new StringBuilder("{");
        for (String name : names) {
            if (json.length() > 1) {
                json.append(", ");
            }
            json.append('"').append(name).append("\": ").append(totals.get(name));
        }
        System.out.println("RESULT " + json.append('}'));
    }
}
